"""The status table of a campaign's stats (``gdnfuzz status``): plain lines for logs, a rich table for a terminal.

Invariants: both come from one set of cells (:func:`status_cells`); the plain text is stable, for scripts to split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fuzz.plural import plural
from fuzz.store.stats import (
    CAMPAIGN,
    CLUSTER,
    STALE_SECONDS,
    TOTAL,
    StatsRow,
    actor_rows,
    profile_rows,
    profile_sentence,
    totals,
)

COLUMNS = (
    ("actor", "<"),
    ("age", ">"),
    ("execs", ">"),
    ("exec/s", ">"),
    ("coverage", ">"),
    ("corpus", ">"),
    ("findings", ">"),
    ("queue", ">"),
)
LIVENESS_COLUMNS = (("state", "<"), ("restarts", ">"))  # shown once any row carries a state
if TYPE_CHECKING:
    from rich.console import Group

STATE_STYLES = {"dead": "bold red", "unreachable": "bold red", "restarting": "yellow", "alive": "green"}


def format_age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172_800:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def _cells(row: StatsRow, now: float, liveness: bool) -> list[str]:
    age = "" if row.actor == TOTAL else format_age(now - row.time)
    cells = [
        row.actor,
        age,
        f"{row.execs:,}",
        f"{row.exec_per_s:,.1f}",
        f"{row.coverage:,}",
        f"{row.corpus_size:,}",
        f"{row.findings:,}",
        f"{row.verifier_queue:,}",
    ]
    return [*cells, row.state or "-", f"{row.restarts:,}"] if liveness else cells


def campaign_line(latest: dict[str, StatsRow], now: float) -> str | None:
    """The campaign's state in words: running, ended, its head lost, or silent for too long."""
    row = latest.get(CAMPAIGN)
    if row is None:
        return None
    ago = format_age(now - row.time)
    if row.state == "ended":
        return f"campaign: ended {ago} ago"
    if row.state == "head-lost":
        return f"campaign: lost its Ray head {ago} ago (gdnfuzz campaign --resume continues it)"
    if now - row.time > STALE_SECONDS:
        return f"campaign: no report for {ago} (its driver is gone; gdnfuzz campaign --resume continues it)"
    return "campaign: running"


def cluster_line(latest: dict[str, StatsRow]) -> str | None:
    """The cluster's capacity now and what it lost since the campaign started."""
    row = latest.get(CLUSTER)
    if row is None:
        return None
    return (f"cluster: {plural(row.nodes, 'node')} alive, {row.nodes_lost} lost; "
            f"{row.cpus:g} {'CPU' if row.cpus == 1 else 'CPUs'} alive, {row.cpus_lost:g} lost")


@dataclass(frozen=True)
class StatusCells:
    """The table's columns, a row per actor sorted by name, the totals, and the campaign, cluster and profile lines."""

    columns: tuple[tuple[str, str], ...]
    actors: list[list[str]]
    total: list[str]
    footer: list[str]


def status_cells(latest: dict[str, StatsRow], now: float) -> StatusCells:
    """The cells of each actor's latest row and of the totals (``age`` is ``now - time``)."""
    actors = actor_rows(latest)
    liveness = any(r.state for r in latest.values())
    return StatusCells(
        COLUMNS + LIVENESS_COLUMNS if liveness else COLUMNS,
        [_cells(actors[a], now, liveness) for a in sorted(actors)],
        _cells(totals(actors.values()), now, liveness),
        [text for text in (campaign_line(latest, now), cluster_line(latest)) if text]
        + [profile_sentence(name, row) for name, row in sorted(profile_rows(latest).items())],
    )


def format_table(latest: dict[str, StatsRow], now: float) -> str:
    """The plain table: the header, a rule, the actors, a rule, the totals, then the footer lines."""
    cells = status_cells(latest, now)
    header = [name for name, _ in cells.columns]
    body = [*cells.actors, cells.total]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(cells.columns))]

    def line(row: list[str]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, (_, a), w in zip(row, cells.columns, widths, strict=True)).rstrip()

    rule = "-" * len(line(header))
    return "\n".join([line(header), rule, *map(line, cells.actors), rule, line(cells.total), *cells.footer])


def _footer_style(text: str) -> str:
    if text.startswith("campaign: running"):
        return "green"
    if text.startswith(("campaign: lost", "campaign: no report")):
        return "bold red"
    return "dim" if text.startswith("campaign: ended") else ""


def status_renderable(latest: dict[str, StatsRow], now: float, title: str | None = None) -> Group:
    """The same cells as a rich table (states coloured, totals as footer), campaign and cluster lines below."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    cells = status_cells(latest, now)
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False, collapse_padding=True, show_footer=True,
                  footer_style="bold")
    for (name, align), total in zip(cells.columns, cells.total, strict=True):
        table.add_column(name, total, justify="right" if align == ">" else "left", no_wrap=True)
    state = [name for name, _ in cells.columns].index("state") if len(cells.columns) > len(COLUMNS) else None
    for row in cells.actors:
        styled: list[Text | str] = list(row)
        if state is not None:
            styled[state] = Text(row[state], style=STATE_STYLES.get(row[state], ""))
        table.add_row(*styled)
    heading = [Text(title, style="italic")] if title else []
    return Group(*heading, table, *(Text(line, style=_footer_style(line)) for line in cells.footer))
