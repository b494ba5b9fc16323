"""A sandboxed split's run answered from a tape: the candidate's child runs the whole scenario on its own
scheduler, calling the split in-process, and streams one entry per split call (its arguments, a digest of
what the call presents, the answer); the deciding run answers its call k from entry k.

Threat model. The candidate's process decides its answers, and a split that behaves one way under test and
another in production is beyond any test. What holds: the verdict is computed from the deciding process's
own run and states, on answers the candidate's process gave to calls that run made. Entry k answers call k
only where the call's arguments and :func:`~fuzz.sandbox.views.presented` digest equal the entry's, and the
answer is then judged by the split's contract here like any other. A tape that does not match (an argument
or a digest differs, too few or too many entries, malformed, oversized, late, its child gone) is refused:
the run is made again with one exchange a call (``fuzz.sandbox.remote``), from the start, and counted in
:data:`FIGURES`. A tape is used or refused, never believed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuzz.model.deadline import DeadlineExceeded, deadline_seconds
from fuzz.model.decision import asking_what_if
from fuzz.model.policies import Policy, Rewind, SplitRaised
from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario
from fuzz.sandbox.channel import ChildFailed, JsonChild
from fuzz.sandbox.remote import Described, RemoteSplit, run_bound
from fuzz.sandbox.views import presented
from fuzz.verbosity import verbose

TAPE_REFUSED_LINE = "gdnfuzz-tape-refused"  # ``fuzz.search.libfuzzer`` reads it off a worker's stderr
MAX_TAPE_LINE = 1 << 20  # bytes in one line of a tape (a batch of entries)
MAX_ENTRIES = 1 << 20  # entries in one tape: more is refused (a run's split calls are far fewer)
MAX_ENDED = 200  # characters of the child's word on why its run ended that a refusal repeats
FIGURES = {"taped": 0, "refused": 0}  # runs of this process answered from a tape, and tapes refused


@dataclass
class Refusal:
    """Why a tape was refused: at which call, and what the candidate's own behaviour explains, if anything."""

    call: int
    reason: str
    heard: list[list[Any]] = field(default_factory=list)  # (args, digest, answer) of the synchronous run


class _Refused(Rewind):
    def __init__(self, call: int, reason: str):
        super().__init__(reason)
        self.refusal = Refusal(call, reason)


class _Interrupted(Rewind):
    """The run was interrupted while it waited on the tape (^C, a command's time bound): it stops, and the
    interruption is raised from :meth:`TapedRun.result` (a split's contract would take it for an answer)."""

    def __init__(self, cause: BaseException):
        super().__init__(repr(cause))
        self.cause = cause


class TapedRun:
    """One run of a sandboxed split answered from its child's tape (module docstring)."""

    def __init__(self, remote: RemoteSplit, tape_child: JsonChild, request: dict[str, Any]):
        self.remote, self.child, self.request = remote, tape_child, request
        self.entries: list[list[Any]] = []
        self.used = 0
        self.done: int | None = None
        self.ended = ""  # what the child says ended its run early (an exception), one line
        self.refusal: Refusal | None = None

    @staticmethod
    def of(policy: Policy, scenario: Scenario, max_steps: int | None,
           model_infos: Callable[[], str]) -> TapedRun | None:
        """The taped run of ``policy`` on ``scenario``, where one can be made: a sandboxed split (not a whole
        branch's) whose scope keeps a tape child for it. Nothing is computed for any other policy."""
        split = policy.split
        if not isinstance(split, RemoteSplit) or policy.checkout is not None:
            return None
        child = split.tape_child()
        if child is None:
            return None
        return TapedRun(split, child, {"op": "run", "scenario": scenario.to_dict(), "max_steps": max_steps,
                                       "model_infos": model_infos()})

    def result(self, run: Callable[[Callable[..., Any]], RunResult]) -> RunResult:
        """``run(split)`` with this tape's split; where the tape is refused, ``run`` again with the per-call
        split, which records what it heard so ``-v`` can say why the tape departed."""
        try:
            self.child.send(self.request)
            result = run(self._split)
            self._finish()
            FIGURES["taped"] += 1
            return result
        except _Interrupted as interrupted:
            raise interrupted.cause from None
        except _Refused as refused:
            self.refusal = refused.refusal
        except ChildFailed as exc:
            self.refusal = Refusal(0, f"its child {exc.how}")
        except Exception:  # the run's own end (a configuration vLLM rejects): the child's run ends the same way
            self._drain()
            raise
        except BaseException:  # interrupted (^C, a command's time bound): the child may still be working
            self.child.kill()
            raise
        self.child.kill()
        FIGURES["refused"] += 1
        REFUSALS.append(self.refusal)
        del REFUSALS[:-KEPT_REFUSALS]
        heard = self.refusal.heard
        result = run(_Heard(self.remote, heard))
        self._explain()
        return result

    # ---------------------------------------------------------------- the tape's split

    def _split(self, scheduler: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
               num_external_computed_tokens: int = 0) -> Any:
        args = [num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens]
        if asking_what_if():  # a disagreement's neutralized calls: not the run's, asked one by one
            return self.remote(scheduler, request, *args)
        call = self.used
        entry = self._entry(call)
        self.used += 1
        if entry[0] != args:
            raise _Refused(call, f"call {call}: the tape's arguments {entry[0]} are not the run's {args}")
        if entry[1] != presented({"self": scheduler, "request": request}):
            raise _Refused(call, f"call {call}: the tape was recorded on another state than the run's")
        answer = entry[2]
        if "value" in answer:
            return answer["value"]
        if "raised" in answer and "unfit" not in answer:
            raise SplitRaised(str(answer["raised"]))
        if "other" in answer:
            return Described(str(answer["other"]))
        raise _Refused(call, f"call {call}: an answer the tape does not decide ({sorted(answer)[:3]})")

    def _entry(self, call: int) -> list[Any]:
        while call >= len(self.entries):
            if self.done is not None:
                ended = f" (its child's run ended early: {self.ended})" if self.ended else ""
                raise _Refused(call, f"the tape ends after {len(self.entries)} entries, the run made more calls{ended}")
            self._take()
        return self.entries[call]

    def _take(self) -> None:
        """Read one line of the tape: a batch of entries, or its end."""
        call = len(self.entries)
        try:
            line = self.child.read(run_bound(deadline_seconds()), "send its tape", MAX_TAPE_LINE)
        except DeadlineExceeded:
            raise _Refused(call, "the tape was late: the run's deadline passed waiting on it") from None
        except ChildFailed as exc:
            raise _Refused(call, f"the tape's child {exc.how}") from None
        except BaseException as exc:
            self.child.kill()
            raise _Interrupted(exc) from None
        if type(line.get("done")) is int and set(line) <= {"done", "ended"} and type(line.get("ended", "")) is str:
            self.done, self.ended = line["done"], " ".join(line.get("ended", "").split())[:MAX_ENDED]
            if self.done != len(self.entries):
                raise _Refused(call, f"the tape says {self.done} entries and sent {len(self.entries)}")
            return
        batch = line.get("tape")
        if len(line) != 1 or type(batch) is not list or not all(_well_formed(e) for e in batch):
            raise _Refused(call, f"a malformed tape line ({str(line)[:80]})")
        self.entries.extend(batch)
        if len(self.entries) > MAX_ENTRIES:
            raise _Refused(call, f"the tape is over {MAX_ENTRIES} entries")

    def _finish(self) -> None:
        """The run is over: the tape must end exactly where its calls did."""
        while self.done is None and len(self.entries) <= self.used:
            self._take()
        if self.done is None or self.done != self.used:
            raise _Refused(self.used, f"the tape has entries for calls the run did not make (it made {self.used})")

    def _drain(self) -> None:
        """The run ended by an exception of its own (a configuration vLLM rejects): the child's tape is read to its
        end, or the child is stopped, so nothing of this run is read as the next one's."""
        try:
            while self.done is None:
                self._take()
        except (_Refused, DeadlineExceeded):
            self.child.kill()

    def _explain(self) -> None:
        """Under ``-v``, one line: why the tape was refused, and where the candidate itself is why."""
        assert self.refusal is not None
        self.refusal.reason += self._why()
        if verbose():  # a harness worker's stderr is its supervisor's channel, which shows it under -v
            print(f"{TAPE_REFUSED_LINE} {self.remote.spec}: {self.refusal.reason}", file=sys.stderr, flush=True)

    def _why(self) -> str:
        """What the synchronous run shows of the candidate: the first call where its answer or its state differs
        from the tape's."""
        assert self.refusal is not None
        heard = self.refusal.heard
        for k, (taped, again) in enumerate(zip(self.entries, heard, strict=False)):
            if taped[:2] == again[:2] and taped[2] != again[2]:
                return f"; the candidate answered call {k} two ways ({taped[2]} on the tape, then {again[2]})"
            if taped[:2] != again[:2]:
                return (f"; from call {k} the tape does not hold the deciding run's calls: the candidate changed what "
                        f"its child's run reads (its scheduler or request), or wrote to the tape itself")
        if self.entries and self.done == len(self.entries) != len(heard):
            return (f"; after call {min(len(self.entries), len(heard)) - 1} its child's run went another way on the "
                    f"same answers: the candidate changed what that run reads (its scheduler or request)")
        return ""


def _well_formed(entry: Any) -> bool:
    return type(entry) is list and len(entry) == 3 and type(entry[0]) is list and type(entry[1]) is str \
        and type(entry[2]) is dict


class _Heard:
    """The per-call split of a refused tape's run, recording what it heard at each call."""

    def __init__(self, remote: RemoteSplit, heard: list[list[Any]]):
        self.remote, self.heard = remote, heard

    def __call__(self, scheduler: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
                 num_external_computed_tokens: int = 0) -> Any:
        args = [num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens]
        if asking_what_if():
            return self.remote(scheduler, request, *args)
        roots = {"self": scheduler, "request": request}
        digest = presented(roots)
        answer, asked = self.remote.ask_child(roots, args)
        self.heard.append([args, digest, answer])
        return self.remote.answer_of(answer, asked)


KEPT_REFUSALS = 64
REFUSALS: list[Refusal] = []  # this process's last refusals, newest last (tests and ``-v``)
