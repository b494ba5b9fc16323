"""A finding's root cause in words, with the line of the installed vLLM that decides it.

The candidate's own finding: where its split departs from the reference; one vLLM shares: vLLM's defect, read off its
run. Invariant: every ``file:line`` is the installed vLLM's; a finding with nothing to say gets no line, not a guess."""

from __future__ import annotations

from fuzz.model.result import Fault, RunResult
from fuzz.oracle.finding import Finding
from fuzz.oracle.judge import crossing_chunk
from fuzz.oracle.verdict import reference_is_wrong
from fuzz.report.vllm_terms import estimate_line, split_line


def _vllm_run(f: Finding) -> RunResult:
    """The run of vLLM's own code in a finding it shares: the reference's, else the candidate's."""
    return f.reference_run if f.reference_run is not None and f.reference != f.candidate and \
        f.candidate != "vllm" else f.candidate_run


def _exception(run: RunResult) -> Fault | None:
    return next((x for x in run.faults if x.kind == "exception"), None)


def _raised_at(fault: Fault) -> tuple[str, str] | None:
    """``(vllm/...py:LINE, the line)`` where the exception was raised: the stack's last frame."""
    lines = (fault.stack or "").splitlines()
    frames = [i for i, line in enumerate(lines) if not line.startswith(" ") and " in " in line]
    if not frames:
        return None
    last = frames[-1]
    code = lines[last + 1].strip() if last + 1 < len(lines) and lines[last + 1].startswith(" ") else ""
    return lines[last].split(" in ")[0], code


def _admitting_estimate(fault: Fault) -> tuple[str, str, str] | None:
    """For a pool that ran dry in a manager's ``allocate_new_blocks``: ``(Manager.get_num_blocks_to_allocate,
    file:line, the line)`` of the estimate that decides; None for any other exception."""
    if "free blocks from the pool" not in fault.detail:
        return None
    frames = [line for line in (fault.stack or "").splitlines() if not line.startswith(" ") and " in " in line]
    allocating = [frame.split(" in ")[0] for frame in frames
                  if frame.endswith(" in allocate_new_blocks") and "single_type_kv_cache_manager.py:" in frame]
    if not allocating:
        return None
    return estimate_line(int(allocating[-1].rsplit(":", 1)[1]))


def vllm_defect(f: Finding) -> str | None:
    """vLLM's own defect in a finding its split shares, in a sentence."""
    run = _vllm_run(f)
    fault = _exception(run)
    if fault is not None:
        estimate = _admitting_estimate(fault)
        admitted = (f" `KVCacheManager.allocate_slots` admitted the allocation on `{estimate[0]}`'s estimate "
                    "of the blocks it needs, and the allocation took more than that estimate."
                    if estimate is not None else "")
        return (f"at step {fault.step}, vLLM's `Scheduler.schedule()` raises `{fault.detail}` instead of leaving "
                f"the request waiting.{admitted}")
    if not run.poisoned:
        return None
    slot, block = run.poisoned[0], f.minimized.engine.mamba_block_size
    chunk, crossed = crossing_chunk(run, slot), ""
    if chunk is not None:
        checkpoint = (f", exporting an internal prefill checkpoint (state@{chunk.checkpoint_tokens}) instead of "
                      "stopping" if chunk.checkpoint_tokens is not None else "")
        start = (f"which starts mid-block at {chunk.start} and runs past" if chunk.start % block else
                 f"which starts on a block boundary at {chunk.start} and runs past")
        crossed = (f"vLLM's own split scheduled `{chunk.request_id}`'s chunk [{chunk.start}, "
                   f"{chunk.start + chunk.num_tokens}), {start} the boundary at {slot.claimed_tokens}{checkpoint}; ")
    return (f"{crossed}the KV-cache manager hashed column {slot.column} (block {slot.block_id}, B = {block}) as "
            f"state@{slot.claimed_tokens} while it holds {slot.held}, at step {slot.step}.")


def deciding_line(f: Finding) -> tuple[str, str] | None:
    """``(file:line, the line)`` of vLLM deciding the finding: the stop the candidate departs from; for vLLM's defect
    the raise, the line letting the crossing chunk run, or the manager's estimate (``_admitting_estimate``)."""
    if not reference_is_wrong(f.signature):
        cause = f.verdict.root_cause
        return split_line(cause.decider) if cause is not None else None
    run = _vllm_run(f)
    fault = _exception(run)
    if fault is not None:
        estimate = _admitting_estimate(fault)
        return estimate[1:] if estimate is not None else _raised_at(fault)
    if not run.poisoned:
        return None
    chunk = crossing_chunk(run, run.poisoned[0])
    return split_line("internal-checkpoint" if chunk is not None and chunk.checkpoint_tokens is not None
                      else "next-boundary")


def cause_words(f: Finding) -> str | None:
    """The root cause in a sentence ending with the deciding line where there is one; None: nothing to say."""
    line = deciding_line(f)
    at = f" Decided at {line[0]}: `{line[1]}`." if line else ""
    if reference_is_wrong(f.signature):
        defect = vllm_defect(f)
        return None if defect is None else defect + at
    cause = f.verdict.root_cause
    if cause is None:
        return None
    needs = f", which needs {', '.join(cause.conditions)}" if cause.conditions else ""
    return (f"at step {cause.step}, request `{cause.request_id}` was offered {cause.offered} tokens from "
            f"position {cause.start}; `{f.candidate}` scheduled {cause.candidate} where `{f.reference}` "
            f"scheduled {cause.reference} ({cause.departure}, at vLLM's {cause.decider} stop{needs}).{at}")
