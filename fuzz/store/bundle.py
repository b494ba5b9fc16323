"""The crash bundle: one directory ``crashes/<signature>/`` per finding, and the one module that
writes, reads, validates and updates it.

A bundle holds:

- ``scenario.json``: the minimized scenario (the format of :mod:`fuzz.model.scenario`) with an
  ``expect`` annotation; also written to ``corpus/regressions/<signature>.json`` so CI replays it;
- ``original.json``: the input as the fuzzer found it;
- ``verdict.json``: ``signature``, ``kind``, ``summary`` (one line), ``candidate``, ``reference``,
  ``first_request``, ``first_step``, ``tier``, ``confirmed`` (``"confirmed"``, ``"not confirmed"``,
  ``"inconclusive"`` or null), ``environment`` (``vllm``, ``torch``, ``device``; more keys allowed),
  ``hits``, the full verdict and the minimization's stage timings;
- ``report.md``: the human-readable report (:mod:`fuzz.report.finding_report`).

Invariants kept here:
- one directory per signature: a second finding of a known signature only bumps ``hits``;
- every file is written through ``fuzz.store.atomic.atomic_write``, and ``verdict.json`` last, so a
  bundle with a verdict is complete; every later change to ``verdict.json`` goes through
  :func:`update_verdict` (read, change, one atomic write);
- :func:`load_bundle` accepts a bundle only if every file is present, every field has its type and
  the signature is the directory's name; anything else raises :class:`BundleError` naming the file
  and the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.errors import FieldError
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import Scenario, ScenarioError, load_scenario, pretty_json, scenario_summary
from fuzz.oracle.finding import Finding, environment
from fuzz.report.finding_report import render_report
from fuzz.store.atomic import atomic_write

BUNDLE_FILES = ("scenario.json", "original.json", "verdict.json", "report.md")
CONFIRMED_STATES = ("confirmed", "not confirmed", "inconclusive", None)
ENVIRONMENT_KEYS = ("vllm", "torch", "device")
SIGNATURE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class BundleError(FieldError):
    """A crash bundle that cannot be used, with the file and field at fault."""

    def __init__(self, file: str | Path, field_path: str, message: str):
        super().__init__(field_path, message, file)


@dataclass(frozen=True)
class CrashBundle:
    """One validated ``crashes/<signature>/`` directory."""

    path: Path
    verdict: dict[str, Any]
    scenario: Scenario
    annotations: dict[str, Any]
    original: Scenario
    report: str

    @property
    def signature(self) -> str:
        return self.verdict["signature"]

    @property
    def environment(self) -> dict[str, str]:
        return self.verdict["environment"]


_VERDICT_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    # field: (accepted types, may be null)
    "signature": ((str,), False),
    "kind": ((str,), False),
    "summary": ((str,), False),
    "candidate": ((str,), False),
    "reference": ((str,), False),
    "first_request": ((str,), True),
    "first_step": ((int,), True),
    "tier": ((str,), False),
    "environment": ((dict,), False),
}


def load_verdict(path: str | Path) -> dict[str, Any]:
    """Read and validate one ``verdict.json``; extra fields are kept as they are."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(path, "<file>", "no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(path, "<json>", f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BundleError(path, "<top>", f"expected a JSON object, got {type(data).__name__}")
    for key, (types, nullable) in _VERDICT_FIELDS.items():
        if key not in data:
            raise BundleError(path, key, "missing")
        value = data[key]
        if value is None and nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            raise BundleError(path, key, f"expected {'/'.join(t.__name__ for t in types)}, got {value!r}")
    if not SIGNATURE_RE.fullmatch(data["signature"]):
        raise BundleError(path, "signature", f"{data['signature']!r} is not a file-name-safe signature")
    if "\n" in data["summary"] or not data["summary"].strip():
        raise BundleError(path, "summary", "expected one non-empty line")
    if data.get("confirmed", "missing") not in CONFIRMED_STATES:
        raise BundleError(path, "confirmed", f"expected one of {CONFIRMED_STATES}, got {data.get('confirmed')!r}")
    for key in ENVIRONMENT_KEYS:
        if not isinstance(data["environment"].get(key), str):
            raise BundleError(path, f"environment.{key}", "expected a string")
    return data


def load_bundle(path: str | Path) -> CrashBundle:
    """Load and validate the crash bundle in directory ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(path, "<dir>", "not a crash bundle directory")
    for name in BUNDLE_FILES:
        if not (path / name).is_file():
            raise BundleError(path / name, "<file>", "no such file")
    verdict = load_verdict(path / "verdict.json")
    if verdict["signature"] != path.resolve().name:
        raise BundleError(
            path / "verdict.json", "signature", f"{verdict['signature']!r} is not the directory name {path.name!r}"
        )
    try:
        scenario, annotations = load_scenario(path / "scenario.json")
        original, _ = load_scenario(path / "original.json")
    except ScenarioError as exc:
        raise BundleError(exc.file or path, exc.field_path, exc.message) from None
    if "expect" not in annotations:
        raise BundleError(path / "scenario.json", "expect", "missing (a minimized scenario records its expectation)")
    report = (path / "report.md").read_text()
    return CrashBundle(path, verdict, scenario, annotations, original, report)



# ---------------------------------------------------------------- writing


def save_finding(f: Finding, crashes: Path, regressions: Path | None) -> Path:
    """Write (or bump) the bundle for ``f.signature``; returns the bundle directory."""
    bundle = crashes / f.signature
    verdict_file = bundle / "verdict.json"
    if verdict_file.exists():
        bump_hits(bundle)
        return bundle
    expect = {f.candidate: VerdictStatus.DIVERGED.value}
    if f.reference == "vllm" and f.verdict.first is not None and f.verdict.first.side == "candidate":
        expect["vllm"] = VerdictStatus.CLEAN.value
    annotations = {"expect": expect, "origin": f"gdnfuzz finding {f.signature}"}
    atomic_write(bundle / "scenario.json", pretty_json(f.minimized, annotations))
    atomic_write(bundle / "original.json", pretty_json(f.original))
    atomic_write(bundle / "report.md", render_report(f, bundle))
    if regressions is not None:
        atomic_write(regressions / f"{f.signature}.json", pretty_json(f.minimized, annotations))
    first = f.verdict.first
    assert first is not None
    verdict = {
        "signature": f.signature,
        "kind": first.kind,
        "summary": first.summary,
        "candidate": f.candidate,
        "reference": f.reference,
        "first_request": first.request_id,
        "first_step": first.step,
        "tier": f.tier,
        "confirmed": None,
        "environment": environment(),
        "hits": 1,
        "verdict": f.verdict.to_dict(),
        "stages": f.stages,
        "sizes": {"original": scenario_summary(f.original), "minimized": scenario_summary(f.minimized),
                  "steps": len(f.candidate_run.steps)},
    }
    _write_verdict(bundle, verdict)
    return bundle


def _write_verdict(bundle: Path, data: dict[str, Any]) -> None:
    atomic_write(bundle / "verdict.json", json.dumps(data, indent=1, sort_keys=True) + "\n")


def update_verdict(bundle: Path, **changes: Any) -> dict[str, Any]:
    """Set ``changes`` in the bundle's ``verdict.json`` (validated first), in one atomic write."""
    data = load_verdict(Path(bundle) / "verdict.json")
    data.update(changes)
    _write_verdict(Path(bundle), data)
    return data


def bump_hits(bundle: Path, by: int = 1) -> int:
    """Count ``by`` more hits of the bundle's signature; returns the new count."""
    data = load_verdict(Path(bundle) / "verdict.json")
    return update_verdict(bundle, hits=int(data.get("hits", 1)) + by)["hits"]
