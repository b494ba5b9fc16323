"""A finding's later life in words: reproducibility, regression range, fixed-in, as table rows.

One renderer for the issue (``fuzz.report.issue``) and the bundle's ``report.md`` section
(``fuzz.store.bundle``), read from ``verdict.json``'s fields (already validated there).

Invariant: :func:`with_lifecycle_section` keeps everything above :data:`MARKER` as it was and replaces
everything from it, so rewriting the section any number of times leaves one copy of it.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- gdnfuzz-lifecycle -->"


def short(sha: str | None) -> str:
    return "—" if not sha else sha[:12]


def lifecycle_rows(verdict: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` rows for the fields present: nothing for a finding never verified nor bisected."""
    rows: list[tuple[str, str]] = []
    repro = verdict.get("reproducibility")
    if repro:
        rows.append(("Reproducibility", f"{repro['hits']} of {repro['tries']} tries against "
                                        f"{repro.get('candidate', 'the candidate')}"))
    found = verdict.get("regression_range")
    if found:
        skipped = f"; skipped (cannot be loaded): {', '.join(short(s) for s in found['skipped'])}" \
            if found["skipped"] else ""
        open_ = found.get("candidates") or []
        maybe = f"; skipped revisions leave it open: any of {', '.join(short(c) for c in open_)}" \
            if len(open_) > 1 else ""
        loaded = f"{found['loaded']} of {found['revisions']} revisions loaded"
        rows.append(("Regression range", f"first bad `{short(found['first_bad'])}` ({found['subject']}), "
                                         f"last good `{short(found['last_good'])}` ({found['mode']} mode, "
                                         f"{loaded}{skipped}{maybe})"))
    fixed = verdict.get("fixed_in")
    if fixed:
        text = fixed["candidate"]
        if fixed.get("revision"):
            text = (f"`{short(fixed['revision'])}` ({fixed.get('subject') or ''}), "
                    f"last bad `{short(fixed.get('last_bad'))}`")
        rows.append(("Fixed in", text))
    return rows


def with_lifecycle_section(report: str, verdict: dict[str, Any]) -> str:
    """``report`` with its lifecycle section (re)written from ``verdict``; none when there is nothing to say."""
    head = report.split(MARKER, 1)[0].rstrip("\n") + "\n"
    rows = lifecycle_rows(verdict)
    if not rows:
        return head
    lines = [f"- **{label}**: {text}" for label, text in rows]
    return f"{head}\n{MARKER}\n## Since it was found\n\n" + "\n".join(lines) + "\n"
