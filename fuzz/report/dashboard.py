"""The campaign dashboard: one self-contained static HTML page (no script, stylesheet, font or request), SVG plots.

Invariants: every string from a file goes through ``html.escape``; a plot draws at most ``MAX_POINTS`` points a
series; a crash directory with a bad ``verdict.json`` still gets a row showing the error; a rate is never shown as
current once the campaign ended or went silent; a ``known`` finding is marked, and the total is drawn dashed."""

from __future__ import annotations

import html
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.errors import FieldError
from fuzz.model.scenario import read_json
from fuzz.oracle.verdict import outcome
from fuzz.report.status_table import format_age
from fuzz.store.atomic import atomic_write
from fuzz.store.bundle import BundleError, load_verdict
from fuzz.store.stats import (
    CAMPAIGN,
    CLUSTER,
    PROFILE_PREFIX,
    STALE_SECONDS,
    TOTAL,
    StatsRow,
    actor_rows,
    latest_by_actor,
    profile_rows,
    read_stats,
    totals_over_time,
)
from fuzz.store.stats import totals as campaign_totals

MAX_POINTS = 400
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
TOTAL_DASH = "7 5"
WIDTH, HEIGHT = 760, 260
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 150, 38, 36

Series = dict[str, list[tuple[float, float]]]


# ---------------------------------------------------------------- plots


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``hi``, steps of 1, 2 or 5 times a power of ten."""
    if hi <= 0:
        return [0.0, 1.0]
    raw = hi / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(math.ceil(hi / step - 1e-9) + 1)]


TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_ticks(span: float, count: int = 6) -> list[float]:
    """Tick positions in seconds from 0 to ``span``, at a step a person would pick (30s, 5m, 1h, ...)."""
    step = next((s for s in TIME_STEPS if s >= span / count), TIME_STEPS[-1] * math.ceil(span / count / 86400))
    return [float(i * step) for i in range(int(span // step) + 1)]


def _thin(points: list[tuple[float, float]], span: tuple[float, float]) -> list[tuple[float, float]]:
    """The last point of each of ``MAX_POINTS`` equal time buckets."""
    if len(points) <= MAX_POINTS:
        return points
    lo, hi = span
    width = (hi - lo) / MAX_POINTS or 1.0
    buckets: dict[int, tuple[float, float]] = {}
    for point in points:
        buckets[min(int((point[0] - lo) / width), MAX_POINTS - 1)] = point
    return [buckets[k] for k in sorted(buckets)]


def _number(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def line_chart(title: str, series: Series, x_label: Callable[[float], str] = format_age) -> str:
    """An inline SVG line chart (x: seconds since the first row unless ``x_label``); the total drawn last, dashed."""
    esc = html.escape
    parts = [
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}" font-family="sans-serif" font-size="11">',
        f"<title>{esc(title)}</title>",
        f'<text x="{MARGIN_LEFT}" y="18" font-size="13" font-weight="600">{esc(title)}</text>',
    ]
    points = [p for pts in series.values() for p in pts]
    if not points:
        parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no data yet</text></svg>')
        return "".join(parts)
    x_lo, x_hi = min(p[0] for p in points), max(p[0] for p in points)
    x_hi = x_hi if x_hi > x_lo else x_lo + 1.0
    y_ticks = nice_ticks(max(p[1] for p in points))
    x_ticks = time_ticks(x_hi - x_lo)
    plot_w, plot_h = WIDTH - MARGIN_LEFT - MARGIN_RIGHT, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def sx(x: float) -> float:
        return MARGIN_LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return MARGIN_TOP + plot_h - y / y_ticks[-1] * plot_h

    for t in y_ticks:
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#e5e5e5"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{_number(t)}</text>'
        )
    for t in x_ticks:
        parts.append(
            f'<text x="{sx(x_lo + t):.1f}" y="{HEIGHT - MARGIN_BOTTOM + 16}" text-anchor="middle">'
            f"{x_label(t)}</text>"
        )
    parts.append(
        f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT}" y1="{MARGIN_TOP}" y2="{MARGIN_TOP + plot_h}" stroke="#888"/>'
        f'<line x1="{MARGIN_LEFT}" x2="{MARGIN_LEFT + plot_w}" y1="{MARGIN_TOP + plot_h}" '
        f'y2="{MARGIN_TOP + plot_h}" stroke="#888"/>'
    )
    for i, (name, pts) in enumerate(sorted(series.items(), key=lambda item: item[0] == TOTAL)):
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in _thin(sorted(pts), (x_lo, x_hi)))
        stroke = f'stroke="{colour}" stroke-width="2"' + (f' stroke-dasharray="{TOTAL_DASH}"' if name == TOTAL else "")
        parts.append(f'<polyline fill="none" {stroke} points="{coords}"><title>{esc(name)}</title></polyline>')
        ly = MARGIN_TOP + 6 + 16 * i
        parts.append(
            f'<line x1="{WIDTH - MARGIN_RIGHT + 8}" x2="{WIDTH - MARGIN_RIGHT + 24}" y1="{ly - 3}" y2="{ly - 3}" '
            f'{stroke}/><text x="{WIDTH - MARGIN_RIGHT + 28}" y="{ly + 1}">{esc(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def actor_series(rows: Sequence[StatsRow], field: str) -> Series:
    """``field`` of each actor over time, skipping actors that never report it."""
    start = min((r.time for r in rows), default=0.0)
    out: Series = {}
    for row in rows:
        if not row.actor.startswith(PROFILE_PREFIX):
            out.setdefault(row.actor, []).append((row.time - start, float(getattr(row, field))))
    return {a: pts for a, pts in sorted(out.items()) if any(y for _, y in pts)}


def total_series(rows: Sequence[StatsRow], labels: dict[str, str]) -> Series:
    """Campaign totals over time: ``labels`` maps a series name to a :class:`StatsRow` field."""
    if not rows:
        return {}
    start = min(r.time for r in rows)
    over_time = totals_over_time(rows)
    return {label: [(t.time - start, float(getattr(t, f))) for t in over_time] for label, f in labels.items()}


# ---------------------------------------------------------------- crashes


@dataclass(frozen=True)
class CrashRow:
    """One crash directory as the dashboard shows it; ``error`` is set when its verdict is unusable."""

    signature: str
    verdict: dict[str, Any] | None
    report: Path | None
    issue_url: str | None
    error: str | None = None


def scan_crashes(crashes_dir: str | Path) -> list[CrashRow]:
    """One row per ``crashes/<signature>/`` holding a ``verdict.json``, sorted by signature."""
    crashes_dir = Path(crashes_dir)
    if not crashes_dir.is_dir():
        return []
    rows: list[CrashRow] = []
    for path in sorted(p for p in crashes_dir.iterdir() if (p / "verdict.json").is_file()):
        report = path / "report.md" if (path / "report.md").is_file() else None
        try:
            verdict = load_verdict(path / "verdict.json")
        except BundleError as exc:
            rows.append(CrashRow(path.name, None, report, None, str(exc)))
            continue
        rows.append(CrashRow(path.name, verdict, report, _issue_url(path)))
    return rows


def _issue_url(path: Path) -> str | None:
    """The issue URL ``issue.json`` records, if it is a readable regular file holding an https:// one."""
    if not (path / "issue.json").exists():
        return None
    try:
        record = read_json(path / "issue.json")
    except FieldError:
        return None
    url = record.get("url") if isinstance(record, dict) else None
    return url if isinstance(url, str) and url.startswith("https://") else None


REFERENCE_SIDE = "reference (known)"  # a signature the reference shares: not the candidate's own


def _crash_table(rows: list[CrashRow], page_dir: Path) -> str:
    if not rows:
        return "<p>No findings yet.</p>"
    esc = html.escape
    head = "".join(
        f"<th>{h}</th>" for h in ("signature", "wrong side", "kind", "summary", "tier", "confirmed",
                                  "candidate / reference", "issue")
    )
    lines = [f'<table class="crashes"><thead><tr>{head}</tr></thead><tbody>']
    for row in rows:
        name = esc(row.signature)
        if row.report is not None:
            href = esc(Path(os.path.relpath(row.report.resolve(), page_dir.resolve())).as_posix())
            name = f'<a href="{href}">{name}</a>'
        if row.verdict is None:
            lines.append(f'<tr class="bad"><td>{name}</td><td colspan="7">{esc(row.error or "")}</td></tr>')
            continue
        v = row.verdict
        confirmed = v.get("confirmed") or "pending"
        issue = f'<a href="{esc(row.issue_url)}">filed</a>' if row.issue_url else ""
        side, label = ("reference", REFERENCE_SIDE) if outcome(row.signature) == "known" else ("candidate",) * 2
        lines.append(
            f'<tr data-signature="{esc(row.signature)}"><td>{name}</td>'
            f'<td class="side {side}">{label}</td><td>{esc(v["kind"])}</td>'
            f"<td>{esc(v['summary'])}</td><td>{esc(v['tier'])}</td>"
            f'<td class="state {esc(confirmed.replace(" ", "-"))}">{esc(confirmed)}</td>'
            f"<td><code>{esc(v['candidate'])}</code> / <code>{esc(v['reference'])}</code></td><td>{issue}</td></tr>"
        )
    lines.append("</tbody></table>")
    if any(outcome(row.signature) == "known" for row in rows):
        lines.append(f'<p class="legend"><span class="side reference">{REFERENCE_SIDE}</span>: the reference policy '
                     "is wrong there too (a bug of the base, reported, never failing the candidate).</p>")
    return "\n".join(lines)


# ---------------------------------------------------------------- page

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
.summary { display: flex; flex-wrap: wrap; gap: 12px; }
.summary div { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; }
.summary b { display: block; font-size: 18px; }
svg.plot { display: block; margin: 12px 0; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border-bottom: 1px solid #eee; padding: 4px 10px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.crashes td:first-child { white-space: nowrap; }
.state.confirmed { color: #b00; font-weight: 600; } .state.not-confirmed { color: #777; }
.state.inconclusive { color: #a60; } tr.bad td { color: #b00; }
td.side.reference, .legend .side.reference { color: #777; font-style: italic; }
tr:has(td.side.reference) td { color: #777; } p.versions { color: #555; }
.actor-state.dead, .actor-state.unreachable { color: #b00; font-weight: 600; } .actor-state.restarting { color: #a60; }
"""


def _actor_table(latest: dict[str, StatsRow], now: float) -> str:
    if not latest:
        return "<p>No stats yet.</p>"
    liveness = any(r.state for r in latest.values())
    names = ("actor", "last report", "execs", "exec/s", "coverage", "findings", *(("state", "restarts") if liveness else ()))
    head = "".join(f"<th>{h}</th>" for h in names)
    body = []
    for row in [*(latest[a] for a in sorted(latest)), campaign_totals(latest.values())]:
        age = "" if row.actor == TOTAL else f"{format_age(now - row.time)} ago"
        cells = [f"{row.execs:,}", f"{row.exec_per_s:,.1f}", f"{row.coverage:,}", f"{row.findings:,}"]
        state = f'<td class="actor-state {html.escape(row.state)}">{html.escape(row.state or "-")}</td>' if liveness else ""
        restarts = f'<td class="num">{row.restarts:,}</td>' if liveness else ""
        body.append(
            f"<tr><td>{html.escape(row.actor)}</td><td>{age}</td>"
            + "".join(f'<td class="num">{c}</td>' for c in cells)
            + state + restarts
            + "</tr>"
        )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _profile_section(profiles: dict[str, StatsRow]) -> list[str]:
    """Under the mixture: what each workload profile ran and found, over every fuzzer."""
    if not profiles:
        return []
    head = "".join(f"<th>{h}</th>" for h in ("profile", "home of", "inputs", "seconds", "new features",
                                             "new signatures", "share now"))
    body = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{html.escape(row.homes or '-')}</td>"
        + "".join(f'<td class="num">{c}</td>' for c in (f"{row.execs:,}", f"{row.seconds:,.1f}", f"{row.coverage:,}",
                                                          f"{row.findings:,}", f"{row.share:.0%}"))
        + "</tr>" for name, row in sorted(profiles.items()))
    return ["<h2>Workload profiles</h2>", f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"]


def run_facts(rows: Sequence[StatsRow], latest: dict[str, StatsRow], now: float) -> list[tuple[str, str]]:
    """Run time and speed: the current exec/s only while the driver reports, else how long, until when, on average."""
    actors = actor_rows(latest)
    total = campaign_totals(actors.values())
    span = (max(r.time for r in rows) - min(r.time for r in rows)) if rows else 0.0
    campaign = latest.get(CAMPAIGN)
    last = max((r.time for r in rows), default=now)
    reporting = now - (campaign.time if campaign else last) <= STALE_SECONDS
    if not rows or reporting and (campaign is None or campaign.state == "running"):
        return [("running for", format_age(span)), ("exec/s now", f"{total.exec_per_s:,.1f}")]
    state = {"ended": "ended", "head-lost": "lost its Ray head"}.get(campaign.state if campaign else "",
                                                                     "last report")
    return [("ran for", format_age(span)), (state, f"{_utc(last)} ({format_age(now - last)} before this page)"),
            ("exec/s average", f"{total.execs / span if span else 0.0:,.1f}")]


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def versions_line(versions: Sequence[dict[str, str]]) -> str:
    """The campaign's ``versions``, vLLM first; runs named only where they differ; an empty record says so."""
    if not any(versions):
        return "vLLM version: not recorded (the campaign's crashes/campaign.json names none)"
    named = [f"vLLM {found.get('vllm', 'not recorded')}"
             + "".join(f", {name} {v}" for name, v in found.items() if name != "vllm") if found
             else "versions not recorded" for found in versions]
    if len(set(named)) == 1:
        return f"Ran against {named[0]}."
    return "Ran against " + "; ".join(f"run {i}: {words}" for i, words in enumerate(named, 1)) + "."


def cluster_facts(latest: dict[str, StatsRow]) -> list[tuple[str, str]]:
    """Nodes and CPUs alive and lost, where the campaign wrote a cluster row."""
    row = latest.get(CLUSTER)
    if row is None:
        return []
    return [("nodes alive / lost", f"{row.nodes} / {row.nodes_lost}"),
            ("CPUs alive / lost", f"{row.cpus:g} / {row.cpus_lost:g}")]


def compare_section(compare: dict[str, Any]) -> list[str]:
    """The A/B cost plots of a ``gdnfuzz compare --json`` report per scenario, sorted by the reference's value."""
    parts = [f"<h2>A/B cost: {html.escape(compare['candidate'])} against {html.escape(compare['reference'])}</h2>"]
    for tier, summary in compare["tiers"].items():
        costs = summary["per_scenario_costs"]
        for figure, title in (("hit_tokens", "cache-hit tokens"), ("forward_passes", "forward passes")):
            ordered = sorted(costs, key=lambda c, f=figure: c["reference"][f])
            series = {side: [(float(i), float(c[side][figure])) for i, c in enumerate(ordered)]
                      for side in ("candidate", "reference")}
            parts.append(line_chart(f"{title} per scenario ({tier} tier, sorted by the reference)", series,
                                    x_label=lambda x: f"{x:.0f}"))
        totals = "".join(f"<tr><td>{html.escape(name)}</td><td>{t['candidate']:,.0f}</td><td>{t['reference']:,.0f}</td></tr>"
                         for name, t in summary["totals"].items())
        parts.append(f"<table><thead><tr><th>{html.escape(tier)} totals</th><th>candidate</th><th>reference</th>"
                     f"</tr></thead><tbody>{totals}</tbody></table>")
    return parts


def render_dashboard(rows: Sequence[StatsRow], crashes: list[CrashRow], page_dir: Path, now: float,
                     compare: dict[str, Any] | None = None, versions: Sequence[dict[str, str]] = ()) -> str:
    """The whole page as one string; links relative to ``page_dir``, ages to ``now``; ``compare`` adds A/B plots."""
    latest = latest_by_actor(rows)
    total = campaign_totals(actor_rows(latest).values())
    confirmed = sum(1 for c in crashes if c.verdict and c.verdict.get("confirmed") == "confirmed")
    facts = [
        *run_facts(rows, latest, now),
        ("execs", f"{total.execs:,}"),
        *cluster_facts(latest),
        ("coverage", f"{total.coverage:,}"),
        ("corpus", f"{total.corpus_size:,}"),
        ("signatures", f"{len(crashes)}"),
        ("confirmed", f"{confirmed}"),
        ("verifier queue", f"{total.verifier_queue:,}"),
    ]
    summary = "".join(f"<div>{k}<b>{v}</b></div>" for k, v in facts)
    queues = {"corpus size": "corpus_size", "verifier queue": "verifier_queue"}
    plots = [
        line_chart("Coverage over time", {**actor_series(rows, "coverage"), **total_series(rows, {TOTAL: "coverage"})}),
        line_chart("Findings over time", total_series(rows, {TOTAL: "findings"})),
        line_chart("exec/s per actor", actor_series(rows, "exec_per_s")),
        line_chart("Corpus size and verifier queue", total_series(rows, queues)),
    ]
    generated = _utc(now)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>gdnfuzz campaign</title><style>{STYLE}</style></head><body>",
            f"<h1>gdnfuzz campaign</h1><p>Generated {generated}.</p>",
            f'<p class="versions">{html.escape(versions_line(versions))}</p>',
            f'<div class="summary">{summary}</div>',
            "<h2>Progress</h2>",
            *plots,
            "<h2>Actors</h2>",
            _actor_table(actor_rows(latest), now),
            *_profile_section(profile_rows(latest)),
            "<h2>Crash signatures</h2>",
            _crash_table(crashes, page_dir),
            *(compare_section(compare) if compare else []),
            "</body></html>",
        ]
    )


def write_dashboard(stats_path: str | Path | None, crashes_dir: str | Path, out: str | Path,
                    compare_path: str | Path | None = None, versions: Sequence[dict[str, str]] = ()) -> Path:
    """Render the page (``stats_path`` None: no plots yet) and write it to ``out`` atomically."""
    rows = read_stats(stats_path) if stats_path is not None else []
    compare = read_compare(compare_path) if compare_path is not None else None
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    page = render_dashboard(rows, scan_crashes(crashes_dir), out.parent, time.time(), compare, versions)
    return atomic_write(out, page)


def read_compare(path: str | Path) -> dict[str, Any]:
    """A ``gdnfuzz compare --json`` report; anything else is an InputError naming the file and field."""
    data = read_json(path)
    tiers = data.get("tiers") if isinstance(data, dict) else None
    if not isinstance(tiers, dict) or not all(isinstance(data.get(k), str) for k in ("candidate", "reference")):
        raise FieldError("tiers", "not a gdnfuzz compare report", path)
    for tier, summary in tiers.items():
        costs = summary.get("per_scenario_costs") if isinstance(summary, dict) else None
        if not isinstance(costs, list) or not isinstance(summary.get("totals"), dict):
            raise FieldError(f"tiers.{tier}", "expected totals and per_scenario_costs", path)
        for i, c in enumerate(costs):
            for side in ("candidate", "reference"):
                values = c.get(side) if isinstance(c, dict) else None
                if not isinstance(values, dict) or not all(
                        isinstance(values.get(f), int) and not isinstance(values.get(f), bool)
                        for f in ("hit_tokens", "forward_passes")):
                    raise FieldError(f"tiers.{tier}.per_scenario_costs[{i}].{side}", "expected integer costs", path)
        for name, t in summary["totals"].items():
            if not isinstance(t, dict) or not all(isinstance(t.get(s), int | float) and not isinstance(t.get(s), bool)
                                                  for s in ("candidate", "reference")):
                raise FieldError(f"tiers.{tier}.totals.{name}", "expected numbers", path)
    return data
