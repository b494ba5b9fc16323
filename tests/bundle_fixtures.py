"""Synthetic crash bundles in the crash store's format, for the issue-filing and dashboard tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCENARIO: dict[str, Any] = {
    "gdnfuzz_scenario": 1,
    "seed": 3,
    "engine": {"mamba_block_size": 1600, "max_num_batched_tokens": 2048, "step_budgets": [364, 2002]},
    "segments": {"system": 1600},
    "requests": [
        {"id": "producer", "prompt": ["system", 400], "max_tokens": 2},
        {"id": "consumer", "prompt": ["system", 16], "arrival_step": 4, "max_tokens": 2},
    ],
}


def verdict(signature: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "signature": signature,
        "kind": "poisoned-slot",
        "summary": "slot hashed as state@1600 holds state@364",
        "candidate": "pre-51113",
        "reference": "vllm",
        "first_request": "consumer",
        "first_step": 4,
        "tier": "sim",
        "confirmed": "confirmed",
        "environment": {"vllm": "0.32.0", "torch": "2.13.0+cpu", "device": "cpu", "python": "3.11"},
    }
    data.update(changes)
    return data


def write_bundle(crashes: Path, signature: str, **verdict_changes: Any) -> Path:
    """Write ``crashes/<signature>/`` with all four files; returns the directory."""
    path = crashes / signature
    path.mkdir(parents=True, exist_ok=True)
    minimized = dict(SCENARIO, expect={"pre-51113": "diverged", "vllm": "clean"})
    original = dict(SCENARIO, requests=[*SCENARIO["requests"], {"id": "noise", "prompt": [900], "arrival_step": 1}])
    (path / "scenario.json").write_text(json.dumps(minimized, indent=1))
    (path / "original.json").write_text(json.dumps(original, indent=1))
    (path / "verdict.json").write_text(json.dumps(verdict(signature, **verdict_changes), indent=1))
    (path / "report.md").write_text(f"# {signature}\n\n| step | chunk |\n|---|---|\n| 0 | [0, 364) |\n")
    return path
