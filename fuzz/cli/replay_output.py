"""``gdnfuzz replay``'s rows as each file is done: a JSON object, a plain line, or a styled line above a progress bar.
Invariant: plain and terminal lines come from one set of cells (:func:`row_cells`) and one layout (:class:`Columns`),
the terminal adding only colour and a transient bar; ``--json`` rows are sorted-key, flushed."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fuzz.model.result import VerdictStatus
from fuzz.tiers import tiers_of

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

Row = dict[str, Any]
HEADERS = ("file", "tier", "verdict", "outcome", "signature", "resumed", "poisoned", "expect", "kind")
OUTCOMES = ("clean", "known", "new", "-")
EXPECTATIONS = ("-", "ok", "FAILED")
STYLES: dict[str, dict[str, str]] = {  # a column's style for each value that has one
    "verdict": {"clean": "green", "diverged": "bold red", "regressed": "red", "inconclusive": "yellow",
                "unsupported": "yellow", "error": "bold red"},
    "outcome": {"clean": "green", "known": "yellow", "new": "bold red"},
    "expect": {"ok": "green", "FAILED": "bold red"},
}


def row_cells(r: Row) -> list[str]:
    """A row's cells under :data:`HEADERS`; ``kind`` carries the tiers' agreement and the candidate's costs."""
    costs = r.get("efficiency") if r["verdict"] != "regressed" else None
    kind = (r["kind"] + (f"  [{r['agreement']}]" if "agreement" in r else "")
            + (f"  (costs: {'; '.join(costs)})" if costs else ""))
    return [r["file"], r["tier"], r["verdict"], r.get("outcome", "-"), r.get("signature", "-"), str(r["resumed"]),
            str(r["poisoned"]), r["expectation"], kind]


class Columns:
    """Widths for rows arriving one at a time: each column starts as wide as its header and its values known up
    front, and widens for a longer value; ``kind``, the last, is never padded."""

    def __init__(self, names: Sequence[str], tier: str):
        known: dict[str, Iterable[str]] = {"file": names, "tier": (*tiers_of(tier), tier),
                                           "verdict": (*VerdictStatus, "error"), "outcome": OUTCOMES,
                                           "expect": EXPECTATIONS}
        self.widths = [max([len(h), *(len(v) for v in known.get(h, ()))]) for h in HEADERS[:-1]]

    def pad(self, cells: list[str]) -> list[str]:
        self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells, strict=False)]
        return [c.ljust(w) for c, w in zip(cells, self.widths, strict=False)] + cells[len(self.widths):]

    def line(self, cells: list[str]) -> str:
        return "  ".join(self.pad(cells)).rstrip()

    def styled(self, cells: list[str]) -> Text:
        from rich.text import Text

        text = Text()
        for header, cell in zip(HEADERS, self.pad(cells), strict=True):
            value = cell.rstrip()
            text.append(value, style=STYLES.get(header, {}).get(value, ""))
            text.append(cell[len(value):] + "  ")
        text.rstrip()
        return text


@contextmanager
def row_view(names: Sequence[str], tier: str, as_json: bool,
             console: Console | None) -> Iterator[Callable[[list[Row]], None]]:
    """One call per file (``names``' order) shows its rows: JSON objects, plain lines, or styled lines above a bar."""
    if as_json:
        def show_json(rows: list[Row]) -> None:
            for r in rows:
                print(json.dumps(r, sort_keys=True), flush=True)

        yield show_json
        return
    columns = Columns(names, tier)
    if console is None:
        def show_plain(rows: list[Row]) -> None:
            for r in rows:
                print(columns.line(row_cells(r)), flush=True)

        print(columns.line(list(HEADERS)), flush=True)
        yield show_plain
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # stderr goes above the bar only where it shares the terminal; redirected (2>log) it stays where it was sent
    with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True,
                  redirect_stderr=sys.stderr.isatty()) as progress:
        upcoming = iter(names)
        task = progress.add_task(next(upcoming, ""), total=len(names))
        header = columns.styled(list(HEADERS))
        header.stylize("bold")
        console.print(header)

        def show_styled(rows: list[Row]) -> None:
            for r in rows:
                console.print(columns.styled(row_cells(r)))
            progress.update(task, advance=1, description=next(upcoming, ""))

        yield show_styled
