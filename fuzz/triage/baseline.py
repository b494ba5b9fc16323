"""The baseline of ``gdnfuzz ci``: the signatures already known, which never fail a run.

Two sources, combinable: a file (one signature a line; blank lines and ``#`` comments ignored) and
the open issues of a GitHub repository (``fuzz.report.github_baseline``: titles ``gdnfuzz <sig>: ...``
as ``gdnfuzz file-issue`` writes them). A baseline file that cannot be read is an input error naming it.

:func:`recorded_own_findings` is the baseline of a null run (a policy against itself): the bugs of
that policy the corpus records, each a file whose ``expect`` says the policy itself diverges.
"""

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
    """The signatures of a baseline file, read a line at a time: a file over :data:`MAX_BASELINE_BYTES`, not a
    regular file, not UTF-8 or with a line that is no signature is a FieldError naming it."""
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
    """Signatures, as ``policy`` against itself names them, of the corpus files that expect ``policy``
    to diverge (``"expect": {"<policy>": "diverged"}``: a bug of that policy's own, with its evidence in
    the file's note). A null run that finds anything else has found a false positive."""
    known = set()
    for path in json_input.json_files(Path(corpus), _refuse):
        scenario, notes = load_scenario(path)
        if expected_status(notes.get("expect"), policy.spec) == "diverged":
            run = replay(scenario, policy, policy)
            known.add(finding_signature(run.verdict, scenario, run.candidate, default_fail_on()))
    return known
