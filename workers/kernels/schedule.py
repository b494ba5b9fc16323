"""Schedule files: the sim tier's runs, carried to machines that have no vLLM.

A schedule file holds, per (scenario, policy), the scenario and the sim tier's
RunResult (which chunk ran in which step, which block each chunk read and
wrote, which state copies ran in each step, every request's output tokens);
each request's full token list follows from those two. The kernel tier replays it with nothing but torch, so a GPU
worker without vLLM can run it. Invariant: an entry replays to the same
outcome as running the sim tier on the same scenario and policy here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario, ScenarioError, prompt_tokens, read_json

FORMAT_KEY = "gdnfuzz_kernel_schedule"
FORMAT_VERSION = 1


@dataclass
class ScheduleEntry:
    """One sim run and the tokens it needs: everything the kernel tier reads."""

    scenario: Scenario
    result: RunResult
    tokens: dict[str, list[int]]
    source: str = ""  # where the scenario came from (a corpus path), for reports

    def to_dict(self) -> dict[str, Any]:
        """Tokens are not stored: ``request_tokens`` derives them from the scenario and the outputs."""
        return {"scenario": self.scenario.to_dict(), "result": self.result.to_dict(), "source": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduleEntry:
        scenario = Scenario.from_dict(data["scenario"])
        result = RunResult.from_dict(data["result"])
        return cls(scenario, result, request_tokens(scenario, result), data.get("source", ""))


def request_tokens(scenario: Scenario, result: RunResult) -> dict[str, list[int]]:
    """Each request's full token list: (parent's full list if it continues one) + own prompt + outputs.

    Outputs are the token ids the run reports in ``result.requests[rid].output_tokens``.
    """
    said = {r.id: list(result.requests[r.id].output_tokens) if r.id in result.requests else []
            for r in scenario.requests}
    return {r.id: prompt_tokens(scenario, r, said) + said[r.id] for r in scenario.requests}


def write_schedule(path: str | Path, entries: list[ScheduleEntry]) -> None:
    data = {FORMAT_KEY: FORMAT_VERSION, "entries": [e.to_dict() for e in entries]}
    Path(path).write_text(json.dumps(data, separators=(",", ":")) + "\n")


def read_schedule(path: str | Path) -> list[ScheduleEntry]:
    """Entries of a schedule file; a malformed file raises ScenarioError naming it and the field."""
    path = Path(path)
    data = read_json(path)
    if not isinstance(data, dict) or data.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ScenarioError(FORMAT_KEY, f"expected a kernel schedule of version {FORMAT_VERSION}", str(path))
    entries = []
    for i, raw in enumerate(data.get("entries", [])):
        try:
            entries.append(ScheduleEntry.from_dict(raw))
        except ScenarioError as exc:
            raise ScenarioError(f"entries[{i}].scenario.{exc.field_path}", exc.message, str(path)) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ScenarioError(f"entries[{i}]", f"malformed entry ({type(exc).__name__}: {exc})", str(path)) from None
    return entries
