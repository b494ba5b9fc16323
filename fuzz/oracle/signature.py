"""Finding signatures: one name per bug, however many inputs reach it: a symptom from the first finding's kind and
:func:`conditions` (never the raw input), or the first split decision the policies differ on (root_cause_name).
Invariant: signatures match ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}`` (a directory name, what ``load_bundle`` accepts)."""

from __future__ import annotations

from collections.abc import Callable

from fuzz.model.result import RunResult, SplitDisagreement
from fuzz.model.scenario import Scenario, prompt_lengths
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.judge import first_finding
from fuzz.oracle.verdict import MAX_SIGNATURE, slug


def _poison_class(finding: Divergence, scenario: Scenario, run: RunResult) -> str:
    """The missed stop, off the audit (claims ``(p + 1) * B`` tokens, holds ``h``): ``foreign-state``, ``overrun``,
    ``unwritten``, ``stale-boundary`` (``h`` a multiple of B), else ``unaligned-end-`` ``past-lcp`` or ``below-lcp``."""
    claimed = finding.details.get("claimed_tokens", 0)
    held = finding.details.get("held_tokens")
    block = scenario.engine.mamba_block_size
    if held is None:
        return "foreign-state"
    if held > claimed:
        return "overrun"
    if held == 0:
        return "unwritten"
    if held % block == 0:
        return "stale-boundary"
    outcome = run.requests.get(finding.request_id or "")
    num_tokens = outcome.prompt_tokens if outcome else claimed
    from vllm.v1.kv_cache_interface import get_mamba_prefill_checkpoint_position

    lcp = get_mamba_prefill_checkpoint_position(num_tokens, block, scenario.engine.spec_decode != "off")
    return "unaligned-end-" + ("past-lcp" if claimed > lcp else "below-lcp")


def conditions(scenario: Scenario, head: str = "", crossing: dict | None = None) -> list[str]:
    """The conditions naming a bug beside its ``head``: the spec family, then ``internal-checkpoint`` for a ``poison-*``
    head (from ``crossing``), else ``partial-hits`` and ``kv-connector`` (they decide resumes, not slots)."""
    e = scenario.engine
    tags = ["eagle-family" if e.spec_decode != "off" else "no-spec"]
    if head.startswith("poison-"):
        crossing = crossing or {}
        if crossing.get("crossing_checkpoint") is not None:
            tags.append("internal-checkpoint")  # the stop it replaced is the bug, wherever the chunk resumed
        return tags
    if e.partial_hash_hits:
        tags.append("partial-hits")
    if connector_served(scenario):
        tags.append("kv-connector")
    return tags


def connector_served(scenario: Scenario) -> set[str]:
    """The requests a KV connector serves: it offers ``prompt - 1`` held tokens at most, rounded down to the block."""
    lengths = prompt_lengths(scenario)
    block = scenario.engine.block_size
    return {r.id for r in scenario.requests if min(r.external_tokens, lengths[r.id] - 1) >= block}


def _name(finding: Divergence, scenario: Scenario, run: RunResult) -> str:
    """What one finding is, without its side: kind and class, then the conditions."""
    if finding.kind == "poisoned-slot":
        head = f"poison-{_poison_class(finding, scenario, run)}"
        if finding.details.get("crossing_checkpoint") is not None and head.startswith("poison-unaligned-end"):
            head = "poison-unaligned-end"  # vLLM's last_cache_position says nothing of a checkpoint's stop
    elif finding.kind in ("exception", "engine-crash"):
        detail = str(finding.details.get("detail", ""))
        head = f"{finding.kind}-{slug(detail.split(':', 1)[0])[:40] or 'unknown'}"
    elif finding.kind == "contract":
        return _contract_name(str(finding.details.get("detail", "")))
    else:
        head = finding.kind
    return "-".join([head, *conditions(scenario, head, finding.details)])


def _contract_name(detail: str) -> str:
    """``contract-raised-<exception>`` or ``contract-out-of-range``: what the split did, never the configuration."""
    raised = detail.removeprefix("split raised ")
    if raised != detail:
        return f"contract-raised-{slug(raised.split('(', 1)[0])[:40] or 'unknown'}"
    return "contract-out-of-range"


def correctness_signature(findings: list[Divergence], scenario: Scenario, candidate_run: RunResult) -> str:
    """The first finding's name, prefixed ``both-side-`` when the reference has the same name, ``reference-side-``
    when only the reference is wrong; ``candidate_run`` gives the prompt lengths."""
    first = first_finding(findings)
    if first is None:
        return "clean"
    name = _name(first, scenario, candidate_run)
    side = wrong_side(findings, scenario, candidate_run)
    return slug(name if side in ("candidate", "unknown") else f"{side}-side-{name}")[:MAX_SIGNATURE]


def wrong_side(findings: list[Divergence], scenario: Scenario, candidate_run: RunResult) -> str:
    """The first finding's side (``findings`` not empty); ``both`` where the reference has one of the same name."""
    first = first_finding(findings)
    assert first is not None
    name = _name(first, scenario, candidate_run)
    sides = {f.side for f in findings if f.kind == first.kind and _name(f, scenario, candidate_run) == name}
    return "both" if "both" in sides or {"candidate", "reference"} <= sides else first.side


def artifact_signature(kind: str, error: str, scenario: Scenario) -> str:
    """An input that killed or hung the harness: the kind, the exception type in the worker's last lines, conditions."""
    return slug("-".join([kind, error, *conditions(scenario)]))[:MAX_SIGNATURE]


# The inputs a split decision can depend on, the most specific first: a finding is named after the most
# specific one its disagreement needs (``SplitDisagreement.conditions``).
SPECIFICITY = ("preempted", "external-start", "junction", "checkpoint-spec", "eagle-drop", "partial-hits")


def _condition(d: SplitDisagreement) -> str | None:
    return next((c for c in SPECIFICITY if c in d.conditions), None)


def _runs_past(d: SplitDisagreement) -> bool:
    return d.candidate > d.reference


def root_cause_name(d: SplitDisagreement) -> str:
    """Named after the root cause, what the candidate does wrong (not the stop it met): ``split-<input>-runs-past``
    or ``-stops-short`` (:data:`SPECIFICITY`), else ``split-runs-past-to-<budget|end>``, ``split-stops-short-at-<end>``
    or ``split-defers``."""
    condition = _condition(d)
    direction = "runs-past" if _runs_past(d) else "stops-short"
    if condition is not None:
        return slug(f"split-{condition}-{direction}")
    if not _runs_past(d):
        return "split-defers" if d.candidate == 0 else slug(f"split-stops-short-at-{d.candidate_end}")
    return slug(f"split-runs-past-to-{'budget' if d.candidate == d.offered else d.candidate_end}")


def stands_for(cause: SplitDisagreement) -> Callable[[SplitDisagreement], bool]:
    """The split decisions a name after ``cause`` stands for: those needing its input, if it names one, else all. The
    candidate ``corrected`` there is that bug fixed, so a finding it no longer has is that bug's (``folds_into``)."""
    condition = _condition(cause)
    return lambda d: condition is None or condition in d.conditions
