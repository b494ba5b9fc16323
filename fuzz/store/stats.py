"""Campaign statistics: one JSON line (:class:`StatsRow`) per actor report, appended, read back tolerating a torn tail.
Counters are running totals, so an actor's latest row is its whole story. Invariants: a row is one ``write(2)`` of a
whole line, ``O_APPEND`` (atomic on a local file, not across NFS hosts); a torn last line waits for its newline, a bad
complete one raises :class:`StatsError`; totals sum ``SUMMED``, take the max of ``SHARED``; liveness is written
(``state``; a silent actor gets a row at rate 0); ``campaign``, ``cluster``, ``profile:`` rows are not actors."""

from __future__ import annotations

import errno
import json
import math
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field, Strict

from fuzz.errors import InputError
from fuzz.model import json_input, schema
from fuzz.model.schema import Says

STATS_ENV = "GDNFUZZ_STATS"
DEFAULT_STATS_PATH = "stats.jsonl"
SUMMED = ("execs", "exec_per_s", "findings", "verifier_queue", "restarts")
SHARED = ("coverage", "corpus_size", "nodes", "nodes_lost", "cpus", "cpus_lost")
TOTAL = "total"
CAMPAIGN, CLUSTER = "campaign", "cluster"  # the rows that are not actors
PROFILE_PREFIX = "profile:"  # neither are these: a workload profile's figures under the mixture
ACTOR_STATES = ("starting", "alive", "restarting", "unreachable", "dead", "stopped")
CAMPAIGN_STATES = ("running", "ended", "head-lost")
STALE_SECONDS = 60.0  # a running campaign whose last row is older than this has stopped reporting


# Every number a row carries is a count, a rate or a time since the epoch: none is negative, and
# these bounds keep a corrupt row from sending the status table or the dashboard's axes to infinity.
MAX_COUNTER = (1 << 63) - 1


def _number(kind: type, limit: float = MAX_COUNTER) -> Any:
    """A field of ``kind`` in ``[0, limit]`` with the stats file's messages; a float field takes an int as it is and is
    bounded by the largest float not above ``limit`` (pydantic compares with the limit rounded to a float)."""
    top = float(limit) if float(limit) <= limit else math.nextafter(float(limit), 0.0)
    members = [Annotated[int, Strict(), Field(ge=0, le=limit)]]
    if kind is float:
        members.append(Annotated[float, Strict(), Field(ge=0, le=top)])
    kinds = (int, float) if kind is float else (int,)
    return Annotated[Union[tuple(members)], Says(  # noqa: UP007 - a union built from a list
        lambda v: f"{v!r} is outside [0, {limit:g}]" if isinstance(v, kinds) and not isinstance(v, bool)
        else f"expected {kind.__name__}, got {v!r}")]


Count, Rate = _number(int), _number(float)
Time, PerSecond = _number(float, float(1 << 40)), _number(float, 1e15)
Text = Annotated[str, Strict(), Says(lambda v: f"expected str, got {v!r}")]


class StatsError(InputError):
    """A stats file that cannot be read, with the file, line and field at fault."""


@dataclass(frozen=True)
class StatsRow:
    """One stats line, typed as the format is; unknown keys are ignored (an older reader reads a newer file)."""

    time: Time  # seconds since the epoch
    actor: Text
    execs: Count = 0
    exec_per_s: PerSecond = 0.0
    coverage: Count = 0
    corpus_size: Count = 0
    findings: Count = 0
    verifier_queue: Count = 0
    state: Text = ""  # ACTOR_STATES, CAMPAIGN_STATES on the campaign row; "" in files older than it
    restarts: Count = 0
    nodes: Count = 0  # the cluster row: nodes alive, and lost since the campaign started
    nodes_lost: Count = 0
    cpus: Rate = 0.0  # the cluster row: CPUs alive, and lost with the nodes that died
    cpus_lost: Rate = 0.0
    seconds: Rate = 0.0  # a profile row: the run time of the inputs its profile made
    share: Rate = 0.0  # a profile row: its share of draws now
    homes: Text = ""  # a profile row: the fuzzers that started leaning toward it, comma-separated

    @classmethod
    def now(cls, actor: str, **counters: Any) -> StatsRow:
        return cls(time=time.time(), actor=actor, **counters)

    def to_line(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":")) + "\n"

    @classmethod
    def from_dict(cls, data: Any, where: str) -> StatsRow:
        if not isinstance(data, dict):
            raise StatsError(f"{where}: expected a JSON object")
        return schema.validate(cls, data, lambda field, message: StatsError(f"{where}: {field}: {message}"))


class StatsWriter:
    """Appends rows to a JSON-lines file. A write the disk cuts short is truncated back and raises ``OSError``, so no
    row lands after a torn one (a campaign's driver is the one writer)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, row: StatsRow) -> None:
        line = row.to_line().encode()
        start = os.fstat(self._fd).st_size
        written = os.write(self._fd, line)  # raises only when nothing was written
        if written != len(line):
            os.ftruncate(self._fd, start)
            raise OSError(errno.ENOSPC, f"wrote {written} of {len(line)} bytes", str(self.path))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> StatsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StatsReader:
    """Reads a stats file incrementally: each :meth:`poll` returns the rows completed since the last."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offset = 0
        self._line = 0

    def poll(self) -> list[StatsRow]:
        """New complete rows; ``FileNotFoundError`` while there is no file, :class:`StatsError` if unreadable or bad."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            kind = "is a directory, not a file" if isinstance(exc, IsADirectoryError) else exc.strerror
            raise StatsError(f"{self.path}: cannot be read ({kind})") from None
        end = data.rfind(b"\n") + 1  # a torn last line stays unread until its newline arrives
        rows: list[StatsRow] = []
        for raw in data[:end].splitlines():
            self._line += 1
            if not raw.strip():
                continue
            where = f"{self.path}:{self._line}"
            parsed = json_input.parse_json(raw, lambda field, message, where=where: StatsError(
                f"{where}: {message}"))
            rows.append(StatsRow.from_dict(parsed, where))
        self._offset += end
        return rows


def read_stats(path: str | Path) -> list[StatsRow]:
    """All complete rows of ``path``; a missing file is a :class:`StatsError`."""
    try:
        return StatsReader(path).poll()
    except FileNotFoundError:
        raise StatsError(f"{path}: no such file") from None


def latest_by_actor(rows: Iterable[StatsRow]) -> dict[str, StatsRow]:
    """The most recent row of each actor, by ``time`` (file order breaks ties)."""
    latest: dict[str, StatsRow] = {}
    for row in rows:
        if row.actor not in latest or row.time >= latest[row.actor].time:
            latest[row.actor] = row
    return latest


def totals(latest: Iterable[StatsRow]) -> StatsRow:
    """One row for the whole campaign from each actor's latest row (see the module invariants)."""
    latest = list(latest)
    combined: dict[str, Any] = {"time": max((r.time for r in latest), default=0.0), "actor": TOTAL}
    for name in SUMMED:
        combined[name] = sum(getattr(r, name) for r in latest)
    for name in SHARED:
        combined[name] = max((getattr(r, name) for r in latest), default=0)
    return StatsRow(**combined)


def totals_over_time(rows: Iterable[StatsRow]) -> list[StatsRow]:
    """The campaign totals after each row, in time order: the series the dashboard plots."""
    latest: dict[str, StatsRow] = {}
    series: list[StatsRow] = []
    for row in sorted(rows, key=lambda r: r.time):
        if row.actor.startswith(PROFILE_PREFIX):
            continue
        latest[row.actor] = row
        series.append(replace(totals(latest.values()), time=row.time))
    return series


def actor_rows(latest: dict[str, StatsRow]) -> dict[str, StatsRow]:
    """The rows of actors, without the campaign, cluster and profile rows."""
    return {a: r for a, r in latest.items() if a not in (CAMPAIGN, CLUSTER) and not a.startswith(PROFILE_PREFIX)}


def profile_rows(latest: dict[str, StatsRow]) -> dict[str, StatsRow]:
    """The workload profiles' rows, by profile name (none where the campaign pinned one profile)."""
    return {a.removeprefix(PROFILE_PREFIX): r for a, r in latest.items() if a.startswith(PROFILE_PREFIX)}


def profile_sentence(name: str, row: StatsRow) -> str:
    """One profile's figures in words (``gdnfuzz status`` and the dashboard)."""
    homes = f" (home of {row.homes})" if row.homes else ""
    return (f"profile {name}{homes}: {row.execs:,} inputs in {row.seconds:,.1f}s, {row.coverage:,} new features, "
            f"{row.findings:,} new signatures, share now {row.share:.0%}")


def default_stats_path() -> str:
    return os.environ.get(STATS_ENV, DEFAULT_STATS_PATH)
