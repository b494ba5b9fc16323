"""A campaign's record on its shared store (``crashes/campaign.json``), for ``gdnfuzz campaign --resume``.

It holds the arguments, each run's start and ``versions`` (``{}`` when unrecorded); the rest is on the store.
Invariants: written atomically, read back validated (:class:`~fuzz.errors.InputError` naming file and field); a
refused write is a :class:`~fuzz.errors.StorageError`; fuzzed time sums each run's start to its last stats row."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.errors import FieldError, StorageError
from fuzz.model import json_input
from fuzz.store.atomic import atomic_write
from fuzz.store.stats import StatsRow, actor_rows, latest_by_actor

CAMPAIGN_FILE = "campaign.json"


@dataclass(frozen=True)
class CampaignRecord:
    arguments: dict[str, Any]  # the command's arguments, JSON values
    runs: tuple[float, ...]  # when each run started
    versions: tuple[dict[str, str], ...] = ()  # what each run ran against; fewer than runs in older records

    def with_run(self, started: float, versions: dict[str, str] | None = None) -> CampaignRecord:
        earlier = self.versions + ({},) * (len(self.runs) - len(self.versions))
        return CampaignRecord(self.arguments, (*self.runs, started), (*earlier, versions or {}))


def run_versions() -> dict[str, str]:
    """What a run starting now runs against, as this (the driver's) machine has it."""
    from fuzz import package_version
    from fuzz.oracle.finding import environment

    found = environment()
    return {"vllm": found["vllm"], "gdnfuzz": package_version(), "torch": found["torch"], "python": found["python"]}


def record_path(crashes: Path) -> Path:
    return crashes / CAMPAIGN_FILE


def write_record(crashes: Path, record: CampaignRecord) -> None:
    path = record_path(crashes)
    try:
        atomic_write(path, json.dumps({"arguments": record.arguments, "runs": list(record.runs),
                                       "versions": list(record.versions)}, indent=1) + "\n")
    except OSError as exc:
        raise StorageError(path, exc) from None


def read_record(crashes: Path) -> CampaignRecord:
    """The record of the campaign whose crash store is ``crashes``; none there is an InputError."""
    path = record_path(crashes)
    if not path.is_file():
        raise FieldError("<file>", "no campaign to resume here (gdnfuzz campaign writes it when it starts)", path)

    def fail(field: str, message: str) -> FieldError:
        return FieldError(field, message, path)

    data = json_input.read_json(path, fail)
    if not isinstance(data, dict) or not isinstance(data.get("arguments"), dict):
        raise fail("arguments", "expected an object")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs or not all(
            isinstance(t, int | float) and not isinstance(t, bool) and t > 0 for t in runs):
        raise fail("runs", "expected a non-empty list of start times")
    versions = data.get("versions", [])
    if not isinstance(versions, list) or len(versions) > len(runs) or not all(
            isinstance(v, dict) and all(isinstance(x, str) for x in (*v, *v.values())) for v in versions):
        raise fail("versions", "expected at most one object of version strings per run")
    return CampaignRecord(data["arguments"], tuple(float(t) for t in runs), tuple(versions))


def fuzzed_seconds(record: CampaignRecord, rows: list[StatsRow]) -> float:
    """Seconds the campaign ran: for each run, from its start to its last stats row before the next run."""
    bounds = [*record.runs, float("inf")]
    total = 0.0
    for start, end in zip(bounds, bounds[1:], strict=False):
        last = max((r.time for r in rows if start <= r.time < end), default=start)
        total += last - start
    return total


def carried_execs(rows: list[StatsRow]) -> dict[str, int]:
    """Each actor's execs as its last row recorded them: where a resumed campaign's counters go on from."""
    return {name: row.execs for name, row in actor_rows(latest_by_actor(rows)).items()}
