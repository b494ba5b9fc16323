"""The driver's stats file, through storage faults.

Invariants: a row the disk refuses (read-only, full: :class:`~fuzz.store.stats.StatsWriter` takes back a
cut-short line, so the file never holds a torn one) is kept, the latest one per actor, and written
before the next row once the disk takes writes again; since every row carries its actor's running
totals, keeping only the latest loses nothing (``fuzz.store.stats``). ``refused`` says why the last
write failed, and is cleared by the next write that succeeds.
"""

from __future__ import annotations

from pathlib import Path

from fuzz.store.stats import StatsRow, StatsWriter


class StatsLog:
    """Rows to a stats file; those the disk refuses are held (latest per actor) and written later."""

    def __init__(self, path: Path):
        self.path = path
        self.writer = StatsWriter(path)  # an OSError here (no stats file at all) is the caller's to report
        self.held: dict[str, StatsRow] = {}
        self.refused: OSError | None = None

    def write(self, rows: list[StatsRow]) -> None:
        for row in rows:
            self.held[row.actor] = row
        try:
            for actor, row in sorted(self.held.items(), key=lambda item: item[1].time):
                self.writer.write(row)
                del self.held[actor]
        except OSError as exc:
            self.refused = exc
            return
        self.refused = None

    def close(self) -> None:
        self.writer.close()
