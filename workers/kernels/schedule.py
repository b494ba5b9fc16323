"""Schedule files: the sim tier's runs (scenario and RunResult per (scenario, policy)), for machines without vLLM.

The kernel tier replays them with torch alone. Invariant: an entry replays to the same outcome as the sim tier
on the same scenario and policy."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.model import json_input, schema
from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario, ScenarioError, prompt_tokens, read_json
from fuzz.store.atomic import atomic_write

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
    def from_dict(cls, data: Any, where: str = "entry", fail: json_input.Fail = ScenarioError) -> ScheduleEntry:
        """An entry from its dict; any field of the wrong shape is ``fail(field, message)``."""
        if not isinstance(data, dict):
            raise fail(where, "expected an object with scenario, result and source")
        for key in data:
            if key not in ("scenario", "result", "source"):
                raise fail(f"{where}.{key}", "unknown field")
        try:
            scenario = Scenario.from_dict(data.get("scenario"))
        except ScenarioError as exc:
            raise fail(f"{where}.scenario.{exc.field_path}", exc.message) from None
        if "result" not in data:
            raise fail(f"{where}.result", "missing")
        result = schema.validate(RunResult, data["result"], _under(f"{where}.result", fail), as_json=True)
        missing = [r.id for r in scenario.requests if r.id not in result.requests]
        if missing:
            raise fail(f"{where}.result.requests", f"no outcome for request {missing[0]!r}")
        source = data.get("source", "")
        if not isinstance(source, str):
            raise fail(f"{where}.source", "expected a string")
        return cls(scenario, result, request_tokens(scenario, result), source)


def _under(where: str, fail: json_input.Fail) -> json_input.Fail:
    """``fail`` for the fields of the value at ``where`` (its own field is ``<top>``)."""
    return lambda field, message: fail(where if field == "<top>" else f"{where}.{field}", message)


def request_tokens(scenario: Scenario, result: RunResult) -> dict[str, list[int]]:
    """Each request's full token list: its parent's full list if it continues one, its prompt, its output tokens."""
    said = {r.id: list(result.requests[r.id].output_tokens) if r.id in result.requests else []
            for r in scenario.requests}
    return {r.id: prompt_tokens(scenario, r, said) + said[r.id] for r in scenario.requests}


def write_schedule(path: str | Path, entries: list[ScheduleEntry]) -> None:
    data = {FORMAT_KEY: FORMAT_VERSION, "entries": [e.to_dict() for e in entries]}
    atomic_write(path, json.dumps(data, separators=(",", ":")) + "\n")


def read_schedule(path: str | Path) -> list[ScheduleEntry]:
    """Entries of a schedule file; a malformed file raises ScenarioError naming it and the field."""
    path = Path(path)

    def fail(field: str, message: str) -> ScenarioError:
        return ScenarioError(field, message, str(path))

    data = read_json(path)
    version = data.get(FORMAT_KEY) if isinstance(data, dict) else None
    if type(version) is not int or version != FORMAT_VERSION:
        raise fail(FORMAT_KEY, f"expected a kernel schedule of version {FORMAT_VERSION}")
    for key in data:
        if key not in (FORMAT_KEY, "entries"):
            raise fail(key, "unknown field")
    raw_entries = data.get("entries", [])
    if not isinstance(raw_entries, list):
        raise fail("entries", "expected a list of entries")
    return [ScheduleEntry.from_dict(raw, f"entries[{i}]", fail) for i, raw in enumerate(raw_entries)]
