"""The driver's stats file, through storage faults.

Invariants: a refused row is held (the latest per actor: rows carry running totals, so nothing is lost) and
written before the next once the disk takes writes; the file never holds a torn line; ``refused`` says why the
last write failed, cleared by the next success."""

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
