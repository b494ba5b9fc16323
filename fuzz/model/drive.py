"""A scenario's side of a run's step loop, the same on every tier: arrivals, aborts and the liveness rule.
Invariants: a request is admitted at its ``arrival_step`` once its parent finished, in scenario order; an unfinished
one is aborted before its ``abort_step`` (never if it arrives later); :data:`STALL_STEPS` empty steps with requests
waiting, or the step limit with requests unfinished, is a ``liveness`` fault."""

from __future__ import annotations

from fuzz.model.result import Fault
from fuzz.model.scenario import Request, Scenario

STALL_STEPS = 16


class Drive:
    """Arrivals, aborts and liveness of one run of ``scenario``."""

    def __init__(self, scenario: Scenario, limit: int):
        self.limit = limit
        self.pending: list[Request] = list(scenario.requests)  # not admitted yet, scenario order
        self.admitted: dict[str, Request] = {}
        self.finished: dict[str, int] = {}  # request id -> the step it finished (or was aborted) in
        self._stalled = 0

    def arrivals(self, step: int) -> list[Request]:
        """The requests to admit before ``step``, in scenario order; from now on they are admitted."""
        due = [r for r in self.pending if r.arrival_step <= step
               and (r.continues is None or self.finished.get(r.continues, step) < step)]
        for r in due:
            self.pending.remove(r)
            self.admitted[r.id] = r
        return due

    def aborts(self, step: int) -> list[str]:
        """The admitted, unfinished requests whose abort step is ``step``; they finish at ``step``."""
        due = [rid for rid, r in self.admitted.items() if r.abort_step == step and rid not in self.finished]
        for rid in due:
            self.finished[rid] = step
        return due

    def finish(self, request_id: str, step: int) -> None:
        """``request_id`` finished in ``step`` (the first report counts)."""
        self.finished.setdefault(request_id, step)

    @property
    def running(self) -> int:
        return sum(rid not in self.finished for rid in self.admitted)

    @property
    def unfinished(self) -> int:
        """Requests not admitted yet, or admitted and not finished."""
        return len(self.pending) + self.running

    def liveness(self, step: int, scheduled: bool) -> Fault | None:
        """The liveness fault that ends the run after ``step`` (which scheduled something or not), if any."""
        self._stalled = self._stalled + 1 if self.running and not scheduled else 0
        if self._stalled >= STALL_STEPS:
            return Fault(kind="liveness", detail=f"nothing scheduled for {STALL_STEPS} steps with requests waiting",
                         step=step)
        if self.unfinished and step + 1 >= self.limit:
            return Fault(kind="liveness", detail=f"{self.unfinished} request(s) unfinished after {self.limit} steps",
                         step=self.limit)
        return None
