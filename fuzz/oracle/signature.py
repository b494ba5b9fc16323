"""Finding signatures: one name per bug, however many inputs reach it.

A signature is built from the first finding's kind and the conditions that
produced it, never from the raw input: which split stop was missed, the
speculative-decoding family, partial hash hits and KV-connector tokens (see
:func:`conditions`), an internal prefill checkpoint in place of a stop, and which side is wrong. A thousand
inputs of one bug give one signature, hence one ``crashes/<signature>/`` directory.

For a poisoned slot the missed stop is read off the audit: the slot claims
``(p + 1) * B`` tokens and holds ``h``. ``h`` not a multiple of B means a chunk
ended mid-block and the next one ran past the boundary (``unaligned-end``);
the boundary is then classed against vLLM's ``last_cache_position`` for that
request (``past-lcp``: the boundary only the #51113 fix enforces; ``below-lcp``:
one even the old gate enforced), unless that chunk exported an internal prefill checkpoint in
place of the stop: then plain ``unaligned-end`` and the ``internal-checkpoint`` tag. A held state that is not a prefix of the claim
is ``foreign-state``; one longer than the claim is ``overrun``; the zero state is ``unwritten``
(a block allocated and hashed, e.g. for an internal prefill checkpoint, that nothing wrote).

These are the symptom names of the correctness class (``fuzz.oracle.classes.correctness``): what a
finding is named when no root cause is known. Where the candidate's and the reference's splits answer
differently on the same scheduler state, a candidate's finding is named after the first such decision
instead (:func:`root_cause_name`): what the candidate does wrong there, never which of vLLM's stops the
run happened to cross, so one slip is one name whatever it poisons, stalls or costs; a contract fault is
named by what the split did, never by the configuration it did it in. :func:`stands_for` says which
decisions such a name covers (the fuzzer folds a new name into a known one whose fix removes it:
``fuzz.search.folding``). Every class names its own findings, and ``fuzz.oracle.verdict.finding_signature`` picks the class.

Invariant: signatures match ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}`` (a directory
name, and what ``fuzz.report.github.load_bundle`` accepts).
"""

from __future__ import annotations

from collections.abc import Callable

from fuzz.model.result import RunResult, SplitDisagreement
from fuzz.model.scenario import Scenario, prompt_lengths
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.judge import first_finding
from fuzz.oracle.verdict import MAX_SIGNATURE, slug


def _poison_class(finding: Divergence, scenario: Scenario, run: RunResult) -> str:
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
    """The conditions that name a bug next to its ``head`` (kind and class).

    Partial hash hits and a KV connector's tokens decide where a request resumes, not what a chunk
    leaves in a slot, so as configuration they name resume-side bugs but not ``poison-*`` ones: one
    missed stop poisons the same way with or without them, and is one bug (one crash directory)
    either way: a stop missed after a connector's load and one missed after a cache hit are told
    apart by their class (``below-lcp`` / ``past-lcp``), not by a tag. A ``poison-*`` head is tagged
    ``internal-checkpoint`` when the chunk that ran past the claimed boundary (``crossing``: the
    poisoned-slot finding's details, see ``fuzz.oracle.judge``) exported an internal prefill
    checkpoint in place of that stop.
    """
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
    """The requests a KV connector can serve tokens to: it offers at most ``prompt - 1`` held tokens,
    rounded down to the attention block (``workers.sim.connector``), so smaller holdings offer none."""
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
    """A split that broke its contract, named by what it did (``contract-raised-<exception>``,
    ``contract-out-of-range``), never by the configuration it did it in: the split's own code is at fault
    wherever it runs."""
    raised = detail.removeprefix("split raised ")
    if raised != detail:
        return f"contract-raised-{slug(raised.split('(', 1)[0])[:40] or 'unknown'}"
    return "contract-out-of-range"


def correctness_signature(findings: list[Divergence], scenario: Scenario, candidate_run: RunResult) -> str:
    """The first finding's name, prefixed ``both-side-`` when the reference has the same one (the same
    name: a different bug on each side is the candidate's), ``reference-side-`` when only the reference
    is wrong. ``candidate_run`` gives the prompt lengths a poison class is read against (every run of
    one scenario has the same)."""
    first = first_finding(findings)
    if first is None:
        return "clean"
    name = _name(first, scenario, candidate_run)
    side = wrong_side(findings, scenario, candidate_run)
    return slug(name if side in ("candidate", "unknown") else f"{side}-side-{name}")[:MAX_SIGNATURE]


def wrong_side(findings: list[Divergence], scenario: Scenario, candidate_run: RunResult) -> str:
    """The side the first finding is on (``findings`` not empty): ``both`` when the reference has the same one
    (the same name), else that finding's own side."""
    first = first_finding(findings)
    assert first is not None
    name = _name(first, scenario, candidate_run)
    sides = {f.side for f in findings if f.kind == first.kind and _name(f, scenario, candidate_run) == name}
    return "both" if "both" in sides or {"candidate", "reference"} <= sides else first.side


def artifact_signature(kind: str, error: str, scenario: Scenario) -> str:
    """The signature of an input that killed (``worker-crash``, ``worker-oom``) or hung (``hang``) the
    harness: the kind, the exception type named in the worker's last lines, and the conditions."""
    return slug("-".join([kind, error, *conditions(scenario)]))[:MAX_SIGNATURE]


# The inputs a split decision can depend on, the most specific first: a finding is named after the most
# specific one its disagreement needs (``SplitDisagreement.conditions``).
SPECIFICITY = ("preempted", "external-start", "junction", "checkpoint-spec", "eagle-drop", "partial-hits")


def _condition(d: SplitDisagreement) -> str | None:
    return next((c for c in SPECIFICITY if c in d.conditions), None)


def _runs_past(d: SplitDisagreement) -> bool:
    return d.candidate > d.reference


def root_cause_name(d: SplitDisagreement) -> str:
    """A finding named after its root cause, the split decision where the candidate answers differently
    from the reference: what the candidate does wrong, never which of vLLM's stops the run happened to
    meet there.

    ``split-<input>-<direction>`` where the disagreement needs an input (:data:`SPECIFICITY`; with it
    neutralized the two splits agree), e.g. ``split-eagle-drop-runs-past``: the candidate mishandles EAGLE's
    block drop, wherever it meets it. Otherwise the candidate's own answer names it: ``split-runs-past-to-<end>``
    (it schedules more than vLLM's split, to ``budget``: all it is offered, or to the position ``<end>``
    that one of vLLM's rules would stop at, or ``sub-block``: none), ``split-stops-short-at-<end>`` (less), or
    ``split-defers`` (nothing where vLLM's split schedules). A one-line slip (an end off by one, a stop
    ignored) is one name however many of vLLM's stops its runs cross; the stop it crossed stays in the
    bundle as evidence (``SplitDisagreement.decider``)."""
    condition = _condition(d)
    direction = "runs-past" if _runs_past(d) else "stops-short"
    if condition is not None:
        return slug(f"split-{condition}-{direction}")
    if not _runs_past(d):
        return "split-defers" if d.candidate == 0 else slug(f"split-stops-short-at-{d.candidate_end}")
    return slug(f"split-runs-past-to-{'budget' if d.candidate == d.offered else d.candidate_end}")


def stands_for(cause: SplitDisagreement) -> Callable[[SplitDisagreement], bool]:
    """The split decisions a signature named after ``cause`` stands for (the bug, not the one decision):
    those that need the same input, where its name has one; every decision where the candidate departs
    from the reference, where it has none (a bug that needs no particular input is the candidate's way of
    splitting wherever it differs). A candidate answering as the reference on them is the candidate with
    that bug fixed (``fuzz.model.policies.corrected``), so a finding it no longer has is that bug's
    (``fuzz.oracle.differential.folds_into``)."""
    condition = _condition(cause)
    return lambda d: condition is None or condition in d.conditions
