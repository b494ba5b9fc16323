"""A finding's later life (reproducibility, regression range, fixed-in) as table rows, and the one place recording it.

Invariants: :func:`with_lifecycle_section` replaces everything from :data:`MARKER` on, so rewriting leaves one copy;
each record rewrites ``report.md`` before ``verdict.json``, atomically, the verdict validated before and after."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz.model import json_input
from fuzz.report.inert import code, text
from fuzz.store.atomic import atomic_write
from fuzz.store.bundle import check_lifecycle, failing, load_verdict, write_verdict

MARKER = "<!-- gdnfuzz-lifecycle -->"


def short(sha: str | None) -> str:
    return "—" if not sha else sha[:12]


def _revision(sha: str | None) -> str:
    """A revision as inline code: a hex SHA as it is, anything else a record holds made inert."""
    shown = short(sha)
    return f"`{shown}`" if re.fullmatch(r"[0-9a-f]{1,12}", shown) else code(shown)


def lifecycle_rows(verdict: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, markdown)`` rows for the fields present; each part from git or a bundle is made inert here."""
    rows: list[tuple[str, str]] = []
    repro = verdict.get("reproducibility")
    if repro:
        rows.append(("Reproducibility", f"{text(repro['hits'])} of {text(repro['tries'])} tries against "
                                        f"{text(repro.get('candidate', 'the candidate'))}"))
    found = verdict.get("regression_range")
    if found:
        skipped = f"; skipped (cannot be loaded): {', '.join(_revision(s) for s in found['skipped'])}" \
            if found["skipped"] else ""
        open_ = found.get("candidates") or []
        maybe = f"; skipped revisions leave it open: any of {', '.join(_revision(c) for c in open_)}" \
            if len(open_) > 1 else ""
        loaded = f"{text(found['loaded'])} of {text(found['revisions'])} revisions loaded"
        rows.append(("Regression range", f"first bad {_revision(found['first_bad'])} ({text(found['subject'])}), "
                                         f"last good {_revision(found['last_good'])} ({text(found['mode'])} mode, "
                                         f"{loaded}{skipped}{maybe})"))
    fixed = verdict.get("fixed_in")
    if fixed:
        shown = text(fixed["candidate"])
        if fixed.get("revision"):
            shown = (f"{_revision(fixed['revision'])} ({text(fixed.get('subject') or '')}), "
                     f"last bad {_revision(fixed.get('last_bad'))}")
        rows.append(("Fixed in", shown))
    return rows


def with_lifecycle_section(report: str, verdict: dict[str, Any]) -> str:
    """``report`` with its lifecycle section (re)written from ``verdict``; none when there is nothing to say."""
    head = report.split(MARKER, 1)[0].rstrip("\n") + "\n"
    rows = lifecycle_rows(verdict)
    if not rows:
        return head
    lines = [f"- **{label}**: {text}" for label, text in rows]
    return f"{head}\n{MARKER}\n## Since it was found\n\n" + "\n".join(lines) + "\n"


# ---------------------------------------------------------------- recording them in a bundle


def _update_life(bundle: Path, change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Apply ``change`` to the bundle's verdict, rewrite ``report.md``'s section, then ``verdict.json`` atomically."""
    bundle = Path(bundle)
    data = load_verdict(bundle / "verdict.json")
    change(data)
    check_lifecycle(bundle / "verdict.json", data)
    report = json_input.read_text(bundle / "report.md", failing(bundle / "report.md"))
    atomic_write(bundle / "report.md", with_lifecycle_section(report, data))
    write_verdict(bundle, data)
    return data


def record_verification(bundle: Path, key: str, record: dict[str, Any],
                        fixed_in: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record ``verifications[key]``, ``reproducibility``, ``fixed_in`` (set when given, cleared on reproducing)."""

    def change(data: dict[str, Any]) -> None:
        data.setdefault("verifications", {})
        data["verifications"] = {**(data["verifications"] or {}), key: record}
        data["reproducibility"] = {"tries": record["tries"], "hits": record["hits"], "candidate": record["candidate"]}
        if fixed_in is not None:
            data["fixed_in"] = fixed_in
        elif record["status"] == "reproduces":
            data["fixed_in"] = None

    return _update_life(bundle, change)


def record_issue_action(bundle: Path, key: str, issue: dict[str, Any]) -> dict[str, Any]:
    """What was done to the finding's issue after verifying against ``key`` (once per key)."""

    def change(data: dict[str, Any]) -> None:
        data["verifications"][key] = {**data["verifications"][key], "issue": issue}

    return _update_life(bundle, change)


def record_range(bundle: Path, field_name: str, value: dict[str, Any]) -> dict[str, Any]:
    """A bisection's result: ``regression_range`` or ``fixed_in``."""
    assert field_name in ("regression_range", "fixed_in")
    return _update_life(bundle, lambda data: data.update({field_name: value}))
