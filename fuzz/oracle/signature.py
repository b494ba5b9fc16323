"""Finding signatures: one name per bug, however many inputs reach it.

A signature is built from the first finding's kind and the conditions that
produced it, never from the raw input: which split stop was missed, the
speculative-decoding family, partial hash hits (for resume-side kinds only, see
:func:`conditions`), KV-connector tokens, and which side is wrong. A thousand
inputs of one bug give one signature, hence one ``crashes/<signature>/`` directory.

For a poisoned slot the missed stop is read off the audit: the slot claims
``(p + 1) * B`` tokens and holds ``h``. ``h`` not a multiple of B means a chunk
ended mid-block and the next one ran past the boundary (``unaligned-end``);
the boundary is then classed against vLLM's ``last_cache_position`` for that
request (``past-lcp``: the boundary only the #51113 fix enforces; ``below-lcp``:
one even the old gate enforced). A held state that is not a prefix of the claim
is ``foreign-state``; one longer than the claim is ``overrun``.

Invariant: signatures match ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}`` (a directory
name, and what ``fuzz.report.github.load_bundle`` accepts).
"""

from __future__ import annotations

import re

from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario
from fuzz.oracle.judge import Divergence, Verdict

SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _slug(text: str) -> str:
    return SAFE.sub("-", text).strip("-").lower()


def _poison_class(finding: Divergence, scenario: Scenario, run: RunResult) -> str:
    claimed = finding.details.get("claimed_tokens", 0)
    held = finding.details.get("held_tokens")
    block = scenario.engine.mamba_block_size
    if held is None:
        return "foreign-state"
    if held > claimed:
        return "overrun"
    if held % block == 0:
        return "stale-boundary"
    outcome = run.requests.get(finding.request_id or "")
    num_tokens = outcome.prompt_tokens if outcome else claimed
    from vllm.v1.kv_cache_interface import get_mamba_prefill_checkpoint_position

    lcp = get_mamba_prefill_checkpoint_position(num_tokens, block, scenario.engine.spec_decode != "off")
    return "unaligned-end-" + ("past-lcp" if claimed > lcp else "below-lcp")


def conditions(scenario: Scenario, head: str = "") -> list[str]:
    """The configuration conditions that name a bug next to its ``head`` (kind and class).

    Partial hash hits decide where a request resumes, not what a chunk leaves in a slot, so they
    name resume-side bugs but not ``poison-*`` ones: one missed stop poisons the same way with or
    without them, and is one bug (one crash directory) either way.
    """
    e = scenario.engine
    tags = ["eagle-family" if e.spec_decode != "off" else "no-spec"]
    if e.partial_hash_hits and not head.startswith("poison-"):
        tags.append("partial-hits")
    if any(r.external_tokens for r in scenario.requests):
        tags.append("kv-connector")
    return tags


def signature(verdict: Verdict, scenario: Scenario, candidate_run: RunResult) -> str:
    first = verdict.first
    if first is None:
        return "clean"
    if first.kind == "poisoned-slot":
        head = f"poison-{_poison_class(first, scenario, candidate_run)}"
    elif first.kind in ("exception", "engine-crash"):
        detail = str(first.details.get("detail", ""))
        head = f"{first.kind}-{_slug(detail.split(':', 1)[0])[:40] or 'unknown'}"
    elif first.kind == "contract":
        head = "contract-out-of-range"
    else:
        head = first.kind
    parts = [head, *conditions(scenario, head)]
    sides = {f.side for f in verdict.findings if f.kind == first.kind}
    side = "both" if "both" in sides or {"candidate", "reference"} <= sides else first.side
    if side not in ("candidate", "unknown"):
        parts.insert(0, f"{side}-side")
    return _slug("-".join(parts))[:128]


def artifact_signature(kind: str, error: str, scenario: Scenario) -> str:
    """The signature of an input that killed (``worker-crash``, ``worker-oom``) or hung (``hang``) the
    harness: the kind, the exception type named in the worker's last lines, and the conditions."""
    return _slug("-".join([kind, error, *conditions(scenario)]))[:128]
