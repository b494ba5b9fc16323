"""A split decision where two policies answer differently, described in vLLM's terms.

:func:`describe` says, for one call of the split on vLLM's real scheduler state where a candidate and a
reference answer differently, as a :class:`~fuzz.model.result.SplitDisagreement`:

- how the candidate departs (ran past the reference's stop, stopped short of it, deferred, did not
  defer);
- the position that decides, classed against the positions vLLM's split stops at, computed with
  vLLM's own helpers (a block boundary, the partial-hit prompt checkpoint, a shared-prefix junction,
  the prefill end, the budget, inside a block), where it lies (past ``last_cache_position``, past
  the prompt), and where the candidate's chunk ends, classed the same way;
- the inputs the disagreement depends on: each is neutralized in turn (EAGLE's block drop, partial
  hits, the checkpoint spec, the junction, the external tokens' place in the start, the request's
  preemptions), both splits are asked again, and the input is a condition when they then agree.

:class:`DisagreementProbe` is a split that answers as the candidate and records its first such decision
(the sim tier's runs carry it); :func:`fuzz.model.policies.corrected` uses :func:`describe` to answer as
the reference on the decisions a signature stands for.

Invariants: describing a decision never changes what the candidate answers; every state a
neutralization changes is restored before the call returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fuzz.model.result import RunResult, SplitDisagreement

SplitFn = Callable[..., int]
Args = tuple[int, int, int]  # num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens


@contextmanager
def _attribute(obj: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


@contextmanager
def _unchanged() -> Iterator[None]:
    yield


def _neutralizers(scheduler: Any, request: Any, args: Args) -> list[tuple[str, Any, Args]]:
    """(condition, a context that turns it off, the arguments to call with) for each condition present."""
    n, local, external = args
    found = []
    if scheduler.use_eagle_block_drop:
        found.append(("eagle-drop", _attribute(scheduler, "use_eagle_block_drop", False), args))
    if scheduler.mamba_partial_cache_hit:
        found.append(("partial-hits", _attribute(scheduler, "mamba_partial_cache_hit", False), args))
    if scheduler.mamba_has_prefill_checkpoint_blocks:
        found.append(("checkpoint-spec", _attribute(scheduler, "mamba_has_prefill_checkpoint_blocks", False), args))
    if request.shared_prefix_boundary:
        found.append(("junction", _attribute(request, "shared_prefix_boundary", 0), args))
    if external:
        found.append(("external-start", _unchanged(), (n, local + external, 0)))
    if request.num_preemptions:
        found.append(("preempted", _attribute(request, "num_preemptions", 0), args))
    return found


def _positions(scheduler: Any, request: Any, start: int, offered: int) -> dict[str, int]:
    """The positions vLLM's split may end a chunk of ``request`` at, by its rules, computed with vLLM's own
    helpers (0: the rule does not apply here)."""
    from vllm.v1.core.sched.scheduler import get_mamba_prefill_checkpoint_position

    block = scheduler.cache_config.block_size
    return {
        "junction": request.shared_prefix_boundary,
        "prompt-checkpoint": get_mamba_prefill_checkpoint_position(
            request.num_prompt_tokens, scheduler.hash_block_size, scheduler.use_eagle_block_drop)
        if scheduler.mamba_partial_cache_hit else 0,
        "lcp": get_mamba_prefill_checkpoint_position(request.num_tokens, block, scheduler.use_eagle_block_drop),
        "next-boundary": (start // block + 1) * block if start % block else 0,
        "aligned-end": (start + offered) // block * block,
        "prefill-end": max(request.num_prompt_tokens, request.num_tokens - 1),
        "budget": start + offered,
    }


def _classify(position: int, start: int, marks: dict[str, int]) -> str:
    """The rule of vLLM's split that ends a chunk at ``position`` (the most specific where several do)."""
    if position == start:
        return "defer"
    return next((rule for rule, at in marks.items() if at > start and position == at), "sub-block")


def _region(position: int, request: Any, marks: dict[str, int]) -> str:
    if position > request.num_prompt_tokens:
        return "replay"
    return "past-lcp" if position > marks["lcp"] else ""


def ask(split: SplitFn, scheduler: Any, request: Any, args: Args) -> int | None:
    """What ``split`` answers, or None where it raises (a split that raises has no answer to compare; the
    candidate's own raising is a contract fault of its run)."""
    try:
        return split(scheduler, request, *args)
    except Exception:  # noqa: BLE001
        return None


_what_if = [False]


def asking_what_if() -> bool:
    """Whether the split is being asked a neutralized question (:func:`describe`), not a call of the run."""
    return _what_if[0]


def _agree_without(candidate: SplitFn, reference: SplitFn, scheduler: Any, request: Any, context: Any,
                   args: Args) -> bool:
    with context:
        _what_if[0] = True
        try:
            ours, theirs = (ask(split, scheduler, request, args) for split in (candidate, reference))
        finally:
            _what_if[0] = False
    return ours is not None and ours == theirs


def describe(candidate: SplitFn, reference: SplitFn, scheduler: Any, request: Any, args: Args, answer: int,
             expected: int) -> SplitDisagreement:
    """The decision where ``candidate`` answered ``answer`` and ``reference`` ``expected`` (they differ) on
    this call (module docstring); its ``step`` is -1 (a run's record knows it)."""
    n, local, external = args
    start = request.num_computed_tokens + local + external
    marks = _positions(scheduler, request, start, n)
    if answer > expected:
        departure = "no-defer" if expected == 0 else "ran-past"
        decider = start + expected  # the reference's stop
    else:
        departure = "deferred" if answer == 0 else "stopped-short"
        decider = start + (expected if answer == 0 else answer)  # what was refused, or the candidate's own stop
    conditions = tuple(name for name, context, neutral in _neutralizers(scheduler, request, args)
                       if _agree_without(candidate, reference, scheduler, request, context, neutral))
    return SplitDisagreement(
        step=-1, request_id=str(request.request_id), start=start, offered=n, candidate=answer, reference=expected,
        departure=departure, decider=_classify(decider, start, marks),
        region=_region(decider, request, marks), conditions=conditions,
        candidate_end=_classify(start + answer, start, marks))


class DisagreementProbe:
    """A split answering as ``candidate`` that records its first disagreement with ``reference``."""

    def __init__(self, candidate: SplitFn, reference: SplitFn):
        self.candidate, self.reference = candidate, reference
        self.found: SplitDisagreement | None = None

    def disagreement(self, run: RunResult) -> SplitDisagreement | None:
        """The first disagreement, with the step it happened in read off the probed ``run``."""
        found = self.found
        if found is None:
            return None
        step = next((s.step for s in run.steps for c in s.chunks
                     if c.request_id == found.request_id and c.start == found.start), -1)
        return SplitDisagreement(**{**vars(found), "step": step})

    def split(self, scheduler: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
              num_external_computed_tokens: int = 0) -> int:
        args = (num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        answer = self.candidate(scheduler, request, *args)
        if self.found is None:
            expected = ask(self.reference, scheduler, request, args)
            if expected is not None and answer != expected:
                self.found = describe(self.candidate, self.reference, scheduler, request, args, answer, expected)
        return answer
