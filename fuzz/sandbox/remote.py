"""The split of a sandboxed policy as the deciding process calls it, one exchange with its child a call: the path
of a run whose tape was refused (``fuzz.sandbox.tape``), and of a disagreement's what-if calls.

Invariants: the scheduler, the runner mirror, the audit and the judge run here, and the child's answer is
checked by the split's contract like any other; an answer that never comes is a fault of the run
(``process-exit``, or ``hang`` past :func:`run_bound`), never a clean one; an interrupted call ends the child.
"""

from __future__ import annotations

from typing import Any

from fuzz.model.checkout import CheckoutMismatch
from fuzz.model.deadline import deadline_seconds
from fuzz.model.policies import CandidateGone, SplitRaised
from fuzz.sandbox.channel import ChildFailed, ChildTimedOut, JsonChild
from fuzz.sandbox.views import Lookup, identities, lookup, snapshot

GRACE_S = 15.0  # beyond the tier's own deadline: the answer's transfer, a busy machine


def run_bound(tier_deadline: float) -> float:
    """How long the parent waits for a child: the tier's deadline, plus :data:`GRACE_S`."""
    return tier_deadline + GRACE_S


def gone(exc: ChildFailed, running: str) -> CandidateGone:
    """The fault of a child that never answered: ``hang`` past the bound, ``process-exit`` otherwise."""
    kind = "hang" if isinstance(exc, ChildTimedOut) else "process-exit"
    return CandidateGone(kind, f"the process running {running} {exc.how} during this run")


class Described:
    """A value the split returned that is not a JSON value, as the child described it (its ``repr`` is
    the description, so the contract's message reads as it would in-process)."""

    def __init__(self, description: str):
        self.description = description

    def __repr__(self) -> str:
        return self.description


class RemoteSplit:
    """``split(self, request, num_new_tokens, local=0, external=0)`` answered by the policy's child."""

    def __init__(self, child: JsonChild, spec: str):
        self.child, self.spec = child, spec

    def __call__(self, scheduler: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
                 num_external_computed_tokens: int = 0) -> Any:
        roots = {"self": scheduler, "request": request}
        answer, asked = self.ask_child(roots, [num_new_tokens, num_new_local_computed_tokens,
                                               num_external_computed_tokens])
        return self.answer_of(answer, asked)

    def tape_child(self) -> JsonChild | None:
        """The child that runs whole runs of this split for a tape (``fuzz.sandbox.tape``), where one is kept."""
        return None

    def ask_child(self, roots: dict[str, Any], args: list[int]) -> tuple[dict[str, Any], Lookup]:
        """One call on ``roots`` (``self``, ``request``): the child's answer, and what this process answered it
        during the call."""
        message = {"op": "split", "snapshot": snapshot(roots), "ids": identities(roots), "args": args}
        asked = lookup(roots)
        try:
            return self.child.call(message, run_bound(deadline_seconds()), asked), asked
        except ChildFailed as exc:
            raise gone(exc, self.spec) from None
        except BaseException:
            self.child.kill()  # interrupted mid-exchange: its answer must never be read as the next call's
            raise

    def answer_of(self, answer: dict[str, Any], asked: Lookup) -> Any:
        """What the split returned, as the child's ``answer`` says (what it raised is raised here); ``asked``:
        what this process answered during the call."""
        if "value" in answer:
            return answer["value"]
        if "unfit" in answer:  # bad input, not the split's answer: it stops the run (exit 2) ...
            unfit = (str(answer["unfit"]).splitlines() or ["?"])[0][:300]
            if any(f" needs {owner}.{name}, " in unfit for owner, name in asked.lacked):
                raise CheckoutMismatch(f"{self.spec}: {unfit}")
            # ... only where this process itself answered that the installed vLLM lacks it: the child runs the
            # candidate's code, and its say-so alone would let a split turn any finding into a usage error
        if "raised" in answer:
            raise SplitRaised(str(answer["raised"]))
        if "other" in answer:
            return Described(str(answer["other"]))
        self.child.kill()
        if "input_error" in answer:  # a fresh child that could not load the policy again
            raise CandidateGone("process-exit", f"the process running {self.spec} could not load it again: "
                                                f"{answer['input_error']}")
        raise CandidateGone("process-exit", f"the process running {self.spec} sent no answer: "
                                            f"{str(answer.get('failed', answer))[:200]}")

    def __repr__(self) -> str:
        return f"<split of {self.spec}, in its sandbox>"

