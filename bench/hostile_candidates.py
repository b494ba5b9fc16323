"""Hostile candidates against every command that runs one: can a candidate fake a pass?

Usage: ``python bench/hostile_candidates.py [--checkout DIR] [--timeout S] [--acts exit,loop]
[--places body,default,import] [--commands replay,run,ci,bisect]``

Each candidate's split calls ``os._exit(0)`` (``exit``) or loops while swallowing every exception
(``loop``), in its body, in a default argument or at import (``tests/hostile_fixtures.py``). Each command
runs as a subprocess of ``python -m fuzz.cli`` with ``PYTHONPATH`` = ``--checkout`` (default this checkout;
an older one measures "before"), ``$GDNFUZZ_DEADLINE_S`` 20 and ``$GDNFUZZ_LOAD_TIMEOUT_S`` 30 (a checkout
that ignores them keeps its own), and is killed after ``--timeout`` seconds:

- ``replay``: the seed regression with the candidate as a policy file; rows printed;
- ``run``: 20 runs of the harness from the seed; bundles stored;
- ``ci``: the candidate as a vLLM checkout, split mode, the seed corpus, no fuzzing; reports written;
- ``bisect``: a two-commit history (the installed files, then the hostile split) and a bundle of the seed
  bug; the bundle's bisect record and temporary checkouts left behind.

One row per (candidate, command): exit code (or the time it was killed at), seconds, what was written.
A faked pass is what must never happen: exit 0 from ``replay``, ``run`` or ``ci`` (the split skips the
seed bug's stop, so each has a finding to report), or from ``bisect`` without a regression range recorded
(a split mode bisect may rightly name the hostile commit: code at import is not part of the split it reads).
Prints the table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from checkout_fixtures import SCHEDULER, make_checkout  # noqa: E402
from conftest import seed_case  # noqa: E402
from hostile_fixtures import EXITS, SWALLOWS, hostile_checkout, hostile_file  # noqa: E402
from lifecycle_fixtures import real_bundle  # noqa: E402

ACTS = {"exit": EXITS, "loop": SWALLOWS}
PLACES = ("body", "default", "import")
ENV = {"GDNFUZZ_DEADLINE_S": "20", "GDNFUZZ_LOAD_TIMEOUT_S": "30"}


def gdnfuzz(checkout: Path, args: list[str], timeout: float) -> tuple[str, float, str]:
    """Run ``gdnfuzz ARGS`` from ``checkout``: (exit code or how it was stopped, seconds, stdout)."""
    env = {**os.environ, **ENV, "PYTHONPATH": str(checkout)}
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fuzz.cli", *args], cwd=checkout, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = str(proc.returncode)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        code = f"killed at {timeout:g} s"
    return code, time.monotonic() - start, out


def replay(checkout: Path, work: Path, act: str, place: str, timeout: float) -> tuple[str, float, str]:
    spec = hostile_file(work, ACTS[act], place)
    code, took, out = gdnfuzz(checkout, ["replay", str(seed_case()), "--candidate", spec, "--json"], timeout)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return code, took, (f"{len(rows)} row(s): " + ", ".join(r.get("signature", "?") for r in rows)) if rows else "no row"


def run(checkout: Path, work: Path, act: str, place: str, timeout: float) -> tuple[str, float, str]:
    corpus, crashes = work / "corpus", work / "crashes"
    (corpus / "seeds").mkdir(parents=True)
    shutil.copy(seed_case(), corpus / "seeds")
    spec = hostile_file(work, ACTS[act], place)
    code, took, _ = gdnfuzz(checkout, ["run", "--candidate", spec, "--runs", "20", "--corpus", str(corpus),
                                       "--crashes", str(crashes)], timeout)
    stored = sorted(d.name for d in crashes.glob("*") if (d / "verdict.json").is_file()) if crashes.is_dir() else []
    return code, took, (f"{len(stored)} bundle(s): " + ", ".join(stored)) if stored else "no bundle"


def ci(checkout: Path, work: Path, act: str, place: str, timeout: float) -> tuple[str, float, str]:
    candidate = hostile_checkout(work / "candidate", ACTS[act], place)
    corpus, out = work / "corpus", work / "out"
    (corpus / "regressions").mkdir(parents=True)
    shutil.copy(seed_case(), corpus / "regressions")
    code, took, _ = gdnfuzz(checkout, ["ci", "--candidate", str(candidate), "--corpus", str(corpus), "--fuzz-time", "0",
                                       "--out", str(out), "--no-strict"], timeout)
    written = [name for name in ("junit.xml", "gdnfuzz.sarif", "summary.md") if (out / name).is_file()]
    return code, took, ", ".join(written) or "no report"


def bisect(checkout: Path, work: Path, act: str, place: str, timeout: float) -> tuple[str, float, str]:
    repo = make_checkout(work / "vllm")
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "installed"], check=True)
    hostile_checkout(work / "hostile", ACTS[act], place)
    shutil.copyfile(work / "hostile" / SCHEDULER, repo / SCHEDULER)
    subprocess.run([*git, "commit", "-qam", "hostile split"], check=True)
    bad = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    bundle = real_bundle(work / "crashes")
    left_before = set(Path(tempfile.gettempdir()).glob(f"gdnfuzz-rev-{bad[:12]}-*"))
    code, took, _ = gdnfuzz(checkout, ["bisect", str(bundle), "--checkout", str(repo), "--good", "HEAD~1",
                                       "--bad", "HEAD"], timeout)
    recorded = "regression_range" in json.loads((bundle / "verdict.json").read_text())
    left = set(Path(tempfile.gettempdir()).glob(f"gdnfuzz-rev-{bad[:12]}-*")) - left_before
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    return code, took, f"{'regression range recorded' if recorded else 'nothing recorded'}, {len(left)} checkout(s) left"


COMMANDS: dict[str, Callable[[Path, Path, str, str, float], tuple[str, float, str]]] = {
    "replay": replay, "run": run, "ci": ci, "bisect": bisect}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", default=str(REPO), help="the gdnfuzz checkout whose CLI runs (default this)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a command is killed")
    parser.add_argument("--acts", default=",".join(ACTS))
    parser.add_argument("--places", default=",".join(PLACES))
    parser.add_argument("--commands", default=",".join(COMMANDS))
    args = parser.parse_args()
    checkout = Path(args.checkout).resolve()
    print(f"gdnfuzz at {checkout}; {', '.join(f'{k}={v}' for k, v in ENV.items())}; killed after {args.timeout:g} s\n")
    print("| candidate | command | exit | s | written |\n|---|---|---|---|---|")
    passes = 0
    for act in args.acts.split(","):
        for place in args.places.split(","):
            for command in args.commands.split(","):
                with tempfile.TemporaryDirectory(prefix="hostile-") as work:
                    code, took, written = COMMANDS[command](checkout, Path(work), act, place, args.timeout)
                passes += code == "0" and not written.startswith("regression range recorded")
                print(f"| {act} in {place} | {command} | {code} | {took:.0f} | {written} |", flush=True)
    print(f"\nfaked passes: {passes}")


if __name__ == "__main__":
    main()
