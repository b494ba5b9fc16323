"""``gdnfuzz ci``'s markdown summary, for a PR comment or ``$GITHUB_STEP_SUMMARY``.

Invariant: the first line says pass, fail or error and why; each new signature gets a row with its verdict and replay
command; known signatures and what ran follow."""

from __future__ import annotations

import shlex
from pathlib import Path

from fuzz.plural import plural
from fuzz.report.ci_report import CiReport
from fuzz.report.source_location import candidate_location


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_summary(report: CiReport, source_root: Path) -> str:
    new, known = report.new_signatures, report.known_signatures
    replayed = [c for c in report.cases if c.phase == "replay"]
    if report.error is not None:
        head = f"**gdnfuzz: ERROR**: nothing was judged: {_cell(report.error)}"
    elif report.unchecked:
        head = (f"**gdnfuzz: ERROR**: the baseline could not be read, so {plural(len(new), 'signature')} outside the "
                "baseline that was read could not be checked")
    elif new:
        head = f"**gdnfuzz: FAILED**: {plural(len(new), 'new signature')}"
    elif report.problems:
        head = f"**gdnfuzz: ERROR**: not everything was judged: {_cell('; '.join(report.problems))}"
    else:
        head = "**gdnfuzz: passed**: no new signature"
    against = f"the base {report.base}, `{report.reference.spec}`" if report.base else f"`{report.reference.spec}`"
    lines = [f"{head} (candidate `{report.candidate.spec}` against {against}).", ""]
    if report.baseline_error is not None:
        lines += [f"The baseline could not be read: {_cell(report.baseline_error)}", ""]
    if new:
        where = candidate_location(report.candidate, source_root)
        lines += [f"Points at `{where.path}:{where.line}` ({where.what}).", "",
                  f"| {'unchecked' if report.unchecked else 'new'} signature | verdict | first input | replay |",
                  "|---|---|---|---|"]
        for sig in new:
            first = report.signatures[sig][0]
            lines.append(f"| `{sig}` | {_cell(first.status + ': ' + first.summary)} | `{_cell(first.name)}` | "
                         f"`{_cell(shlex.join(first.reproduce))}` |")
        lines.append("")
    if known:
        lines += ["Known: " + ", ".join(f"`{s}` ({report.known_because(s)})" for s in known), ""]
    if new and report.problems:
        lines += [f"Not everything was judged: {_cell('; '.join(report.problems))}", ""]
    judged = [c for c in replayed if c.problem is None]
    lines += [f"- corpus replay: {plural(len(judged), 'file')}, {sum(c.signature != 'clean' for c in judged)} diverged"
              + (f", {len(replayed) - len(judged)} not judged" if len(judged) < len(replayed) else ""),
              f"- {report.fuzz_figures()}",
              f"- baseline: {plural(len(report.baseline), 'signature')} from {report.baseline_source}"
              + ("" if report.baseline_error is None else " (the rest could not be read)")]
    return "\n".join(lines) + "\n"
