"""The baseline of ``gdnfuzz ci``: the signatures already known, which never fail a run.

Two sources, combinable: a file (one signature a line; blank lines and ``#`` comments ignored) and
the open issues of a GitHub repository (``fuzz.report.github_baseline``: titles ``gdnfuzz <sig>: ...``
as ``gdnfuzz file-issue`` writes them). A baseline file that cannot be read is an input error naming it.

:func:`recorded_own_findings` is the baseline of a null run (a policy against itself): the bugs of
that policy the corpus records, each a file whose ``expect`` says the policy itself diverges.
"""

from __future__ import annotations

from pathlib import Path

from fuzz.errors import FieldError
from fuzz.model.policies import Policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.verdict import default_fail_on, finding_signature

SIGNATURE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def read_baseline(path: str | Path) -> set[str]:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise FieldError("baseline", f"cannot be read ({type(exc).__name__}: {exc})", path) from None
    found: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not set(line) <= SIGNATURE_CHARS:
            raise FieldError(f"line {number}", f"{line!r} is not a signature (one a line)", path)
        found.add(line)
    return found


def recorded_own_findings(corpus: str | Path, policy: Policy) -> set[str]:
    """Signatures, as ``policy`` against itself names them, of the corpus files that expect ``policy``
    to diverge (``"expect": {"<policy>": "diverged"}``: a bug of that policy's own, with its evidence in
    the file's note). A null run that finds anything else has found a false positive."""
    known = set()
    for path in sorted(Path(corpus).glob("*.json")):
        scenario, notes = load_scenario(path)
        if notes.get("expect", {}).get(policy.spec) == "diverged":
            run = replay(scenario, policy, policy)
            known.add(finding_signature(run.verdict, scenario, run.candidate, default_fail_on()))
    return known
