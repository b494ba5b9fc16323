"""The baseline of ``gdnfuzz ci``: signatures already known, which never fail a run.

Sources, combinable: a file (a signature a line; blanks and ``#`` comments ignored) and a repository's open issues
(``fuzz.report.github_baseline``); a null run's is :func:`recorded_own_findings`."""

from __future__ import annotations

from pathlib import Path

from fuzz.errors import FieldError, InputError
from fuzz.model import json_input
from fuzz.model.expectations import expected_status
from fuzz.model.policies import Policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.verdict import default_fail_on, finding_signature

MAX_BASELINE_BYTES = 16 << 20  # 100,000 signatures of 128 characters fit with room to spare
SIGNATURE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def read_baseline(path: str | Path) -> set[str]:
    """A baseline file's signatures; too big, irregular, not UTF-8 or a non-signature line: FieldError naming it."""
    found: set[str] = set()
    lines = json_input.read_lines(path, lambda _, why: FieldError("baseline", f"cannot be read ({why})", path),
                                  MAX_BASELINE_BYTES)
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not set(line) <= SIGNATURE_CHARS:
            raise FieldError(f"line {number}", f"{line[:80]!r} is not a signature (one a line)", path)
        found.add(line)
    return found


def _refuse(path: Path, why: str) -> None:
    raise InputError(f"{path}: {why}")


def recorded_own_findings(corpus: str | Path, policy: Policy) -> set[str]:
    """Signatures (``policy`` vs itself) of corpus files expecting ``policy`` to diverge; others: false positives."""
    known = set()
    for path in json_input.json_files(Path(corpus), _refuse):
        scenario, notes = load_scenario(path)
        if expected_status(notes.get("expect"), policy.spec) == "diverged":
            run = replay(scenario, policy, policy)
            known.add(finding_signature(run.verdict, scenario, run.candidate, default_fail_on()))
    return known
