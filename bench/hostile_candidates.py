"""Hostile candidates against every command that runs one: can a candidate fake a pass?

Usage: ``python bench/hostile_candidates.py [--checkout DIR] [--timeout S] [--groups exit-loop,forge,data,
escape,warm] [--acts exit,loop] [--places body,default,import] [--commands replay,run,ci,bisect]``

Issue 34's groups (each row: exit code, seconds, what happened; a line with FAKED, CODE RAN, WRITTEN,
REWRITTEN, ALIVE or NEGATIVE is a broken boundary):

- ``forge``: a pre-#51113 split whose module, at import (a policy file; in a split-only checkout, a default
  argument the compiled method evaluates; in a PR's ``scheduler.py``, module level), rewrites the sandbox
  child's handler, patches ``RunResult.to_dict``, installs a split on vLLM's ``Scheduler`` class, writes a
  forged line on the channel socket, or patches the fuzzing worker's judge
  (``tests/hostile_fixtures.FORGERIES``): ``replay``, ``ci`` split-only (replay, and 45 s of fuzzing),
  ``ci`` code-change, the pytest plugin. The honest verdict is a finding: exit 0 is a faked pass;
- ``data``: a scenario's ``expect`` or a bundle's ``verdict.json`` names a policy file (absolute, or
  relative inside the bundle) that leaves a marker when imported: ``export-test``, ``confirm``,
  ``verify-fixed``;
- ``escape``: a split-only checkout whose split writes a file outside every output directory and starts
  a ``setsid`` daemon that rewrites ``ci``'s reports to "passed" 3 s after they appear; checked 10 s after
  ``ci`` exits;
- ``warm``: a warm server started with ``PYTHONPATH=B`` and a run with ``PYTHONPATH=A`` (another module
  of the same name); a server killed 15 s into a run of a correct candidate.

Each candidate's split calls ``os._exit(0)`` (``exit``) or loops while swallowing every exception
(``loop``), in its body, in a default argument or at import (``tests/hostile_fixtures.py``). Each command
runs as a subprocess of ``python -m fuzz.cli`` with ``PYTHONPATH`` = ``--checkout`` (default this checkout;
an older one measures "before", with the seed case from its own corpus), ``$GDNFUZZ_DEADLINE_S`` 20 and ``$GDNFUZZ_LOAD_TIMEOUT_S`` 30 (a checkout
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
import contextlib
import functools
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from checkout_fixtures import SCHEDULER, committed_checkout, make_checkout, replace_split  # noqa: E402
from conftest import seed_case as own_seed_case  # noqa: E402
from hostile_fixtures import (  # noqa: E402
    EXITS,
    SWALLOWS,
    forging_checkout,
    forging_file,
    hostile_checkout,
    hostile_file,
)
from lifecycle_fixtures import real_bundle  # noqa: E402

from fuzz.model.policies import _pre_51113_split  # noqa: E402
from fuzz.sandbox.containment import process_table  # noqa: E402
from fuzz.sandbox.scope import ambient  # noqa: E402

SEED: list[Path] = []  # the measured checkout's own copy of the seed case, where it has one (main)


def seed_case() -> Path:
    """The seed regression as the measured checkout's corpus holds it (an older checkout cannot read this
    checkout's newer scenario format: its replay would be exit 2 for the file, not for the candidate)."""
    return SEED[0] if SEED else own_seed_case()


ACTS = {"exit": EXITS, "loop": SWALLOWS}
PLACES = ("body", "default", "import")
ENV = {"GDNFUZZ_DEADLINE_S": "20", "GDNFUZZ_LOAD_TIMEOUT_S": "30"}  # issue 24's cases: a loop ends at 20 + 15 s
# issue 34's cases: bounds long enough that a loaded machine's first run (a fork server, vLLM's first
# configuration build) never passes for a hang; none of these candidates hangs
LONG_ENV = {"GDNFUZZ_DEADLINE_S": "120", "GDNFUZZ_LOAD_TIMEOUT_S": "240"}


def gdnfuzz(checkout: Path, args: list[str], timeout: float, cwd: Path | None = None) -> tuple[str, float, str]:
    """Run ``gdnfuzz ARGS`` from ``checkout`` (in ``cwd``, default the checkout): (exit code or how it was
    stopped, seconds until the command itself ended, stdout). Its output goes to files, so a process it
    left behind holding them never holds this up."""
    env = {**os.environ, **ENV, **CURRENT_ENV, "PYTHONPATH": str(checkout)}
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "fuzz.cli", *args], cwd=cwd or checkout, env=env, text=True,
                                stdout=out, stderr=err, start_new_session=True)
        try:
            code = str(proc.wait(timeout=timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = f"killed at {timeout:g} s"
        took = time.monotonic() - start
        out.seek(0)
        return code, took, out.read()


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
    repo = work / "vllm"
    hostile_checkout(work / "hostile", ACTS[act], place)
    git = committed_checkout(repo, work / "hostile" / SCHEDULER, "hostile split")
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


# ---------------------------------------------------------------- issue 34: forgeries, data, escapes, warm


def seed_corpus(work: Path, sub: str = "regressions") -> Path:
    corpus = work / "corpus"
    (corpus / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy(seed_case(), corpus / sub)
    return corpus


def forged_verdict(code: str, out: str) -> str:
    """How a forging candidate's run ended: a faked pass is exit 0 (the honest verdict is a finding)."""
    return f"{'FAKED PASS' if code == '0' else 'no fake'}: {out}"


def forge_replay(checkout: Path, work: Path, timeout: float, how: str) -> tuple[str, float, str]:
    code, took, out = gdnfuzz(checkout, ["replay", str(seed_case()), "--candidate", forging_file(work, how), "--json"],
                              timeout)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return code, took, forged_verdict(code, ", ".join(f"{r.get('verdict')} {r.get('signature')}" for r in rows)
                                      or "no row")


def forge_ci(checkout: Path, work: Path, timeout: float, how: str, fuzz_time: int = 0) -> tuple[str, float, str]:
    candidate = forging_checkout(work / "candidate", how)
    out = work / "out"
    code, took, _ = gdnfuzz(checkout, ["ci", "--candidate", str(candidate), "--corpus", str(seed_corpus(work)),
                                       "--fuzz-time", str(fuzz_time), "--out", str(out), "--no-strict"], timeout)
    summary = (out / "summary.md").read_text() if (out / "summary.md").is_file() else ""
    first = next((line for line in summary.splitlines() if line.strip()), "no summary")
    return code, took, forged_verdict(code, first[:100])


def forge_plugin(checkout: Path, work: Path, timeout: float, how: str) -> tuple[str, float, str]:
    spec = forging_file(work, how)
    corpus = seed_corpus(work)
    env = {**os.environ, **ENV, **CURRENT_ENV, "PYTHONPATH": str(checkout)}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gdnfuzz", "--gdnfuzz-corpus", str(corpus / "regressions"), "--gdnfuzz-candidate",
                           spec, "-W", "ignore"], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return str(done.returncode), time.monotonic() - start, forged_verdict(str(done.returncode), last[:100])


def forge_code_change(checkout: Path, work: Path, timeout: float, how: str) -> tuple[str, float, str]:
    """The code-change form: the PR's own scheduler.py carries the pre-#51113 split and, at module level, the
    forgery; the base is the installed vLLM's files."""
    repo = work / "vllm"
    forging_checkout(work / "pr", how, "module")
    committed_checkout(repo, work / "pr" / SCHEDULER, "the PR")
    out = work / "out"
    code, took, _ = gdnfuzz(checkout, ["ci", "--checkout", str(repo), "--base", "HEAD~1", "--corpus",
                                       str(seed_corpus(work)), "--fuzz-time", "0", "--out", str(out), "--no-strict"],
                            timeout)
    summary = (out / "summary.md").read_text() if (out / "summary.md").is_file() else ""
    first = next((line for line in summary.splitlines() if line.strip()), "no summary")
    return code, took, forged_verdict(code, first[:100])


FORGE_CASES: dict[str, Callable[[Path, Path, float], tuple[str, float, str]]] = {
    **{f"{how} | {name}": functools.partial(fn, how=how) for how in ("handler", "record", "leak", "socket")
       for name, fn in (("replay", forge_replay), ("ci split-only", forge_ci), ("plugin", forge_plugin))},
    "judge | ci split-only --fuzz-time 45": functools.partial(forge_ci, how="judge", fuzz_time=45),
    "record in the PR's scheduler.py | ci code-change": functools.partial(forge_code_change, how="record"),
}

EVIL = """import pathlib
pathlib.Path({marker!r}).write_text("imported")
def split(self, request, num_new_tokens, num_new_local_computed_tokens=0, num_external_computed_tokens=0):
    return num_new_tokens
"""


def data_case(checkout: Path, work: Path, timeout: float, where: str, command: str) -> tuple[str, float, str]:
    """A file gdnfuzz reads names a policy file that, when imported, writes a marker; the command reads it."""
    marker = work / "EXECUTED"
    bundle = real_bundle(work / "crashes")
    evil = (bundle if where == "relative" else work) / "evil.py"
    evil.write_text(EVIL.format(marker=str(marker)))
    spec = "evil.py:split" if where == "relative" else f"{evil}:split"
    verdict = json.loads((bundle / "verdict.json").read_text())
    (bundle / "verdict.json").write_text(json.dumps({**verdict, "candidate": spec, "reference": spec}, indent=1))
    scenario = work / "scenario.json"
    scenario.write_text(json.dumps({**json.loads(seed_case().read_text()), "expect": {spec: "diverged"}}))
    argv = {"export-test scenario": ["export-test", str(scenario), "--out", str(work / "t.py")],
            "export-test bundle": ["export-test", str(bundle), "--out", str(work / "t.py")],
            "confirm": ["confirm", str(bundle), "--tier", "engine"],
            "verify-fixed": ["verify-fixed", str(bundle), "--tries", "1"],
            "replay": ["replay", str(bundle / "scenario.json")]}[command]
    code, took, _ = gdnfuzz(checkout, argv, timeout, cwd=bundle if where == "relative" else None)
    return code, took, "CODE RAN FROM DATA" if marker.exists() else "nothing ran"


DATA_CASES: dict[str, Callable[[Path, Path, float], tuple[str, float, str]]] = {
    "scenario expect names /abs/evil.py:split | export-test": functools.partial(
        data_case, where="absolute", command="export-test scenario"),
    "verdict.json names /abs/evil.py:split | export-test": functools.partial(
        data_case, where="absolute", command="export-test bundle"),
    "verdict.json names evil.py:split in the bundle | export-test": functools.partial(
        data_case, where="relative", command="export-test bundle"),
    "verdict.json names /abs/evil.py:split | confirm": functools.partial(data_case, where="absolute", command="confirm"),
    "verdict.json names /abs/evil.py:split | verify-fixed": functools.partial(
        data_case, where="absolute", command="verify-fixed"),
}

ESCAPING = """
def split(self, request, num_new_tokens, num_new_local_computed_tokens=0, num_external_computed_tokens=0):
    import os, pathlib, time
    global _escaped
    if not globals().get("_escaped"):
        _escaped = True
        try:
            pathlib.Path({outside!r}).write_text("written by the candidate")
        except OSError:
            pass
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                import ctypes
                ctypes.CDLL(None).prctl(15, b"gdnfuzz-evil", 0, 0, 0)
                while not pathlib.Path({out!r}, "summary.md").exists():
                    time.sleep(0.2)
                time.sleep(3)  # ci has written its reports and exited by now
                for name in ("summary.md", "junit.xml"):
                    try:
                        pathlib.Path({out!r}, name).write_text("passed (rewritten by the candidate's daemon)")
                    except OSError:
                        pass
                time.sleep(600)
            os._exit(0)
""" + "\n"


def escape_ci(checkout: Path, work: Path, timeout: float) -> tuple[str, float, str]:
    """A split-only checkout whose split, on its first call, writes a file outside every output directory and
    starts a setsid daemon that rewrites ci's reports to "passed" 3 s after they appear."""
    out, outside = work / "out", work / "outside-written"
    candidate = make_checkout(work / "candidate")
    source = ESCAPING.format(outside=str(outside), out=str(out))
    pre = inspect.getsource(_pre_51113_split).split(":\n", 1)[1]  # the pre-#51113 body, after the escape
    replace_split(candidate, textwrap.indent(source.rstrip() + "\n" + pre, "    ")
                  .replace("    def split(", "    def _mamba_block_aligned_split(", 1))
    code, took, _ = gdnfuzz(checkout, ["ci", "--candidate", str(candidate), "--corpus", str(seed_corpus(work)),
                                       "--fuzz-time", "0", "--out", str(out), "--no-strict"], timeout)
    time.sleep(10)  # the daemon's rewrite would have happened by now
    rewritten = [n for n in ("summary.md", "junit.xml") if (out / n).is_file() and "rewritten" in (out / n).read_text()]
    alive = [pid for pid, (_, state, name) in process_table().items()
             if name == "gdnfuzz-evil" and state not in ("Z", "X")]
    for pid in alive:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    return code, took, (f"outside file {'WRITTEN' if outside.exists() else 'not written'}; reports "
                        f"{'REWRITTEN: ' + ', '.join(rewritten) if rewritten else 'intact'}; daemon "
                        f"{'ALIVE' if alive else 'gone'}")


ESCAPE_CASES: dict[str, Callable[[Path, Path, float], tuple[str, float, str]]] = {
    "writes outside, setsid daemon rewrites the reports | ci split-only": escape_ci}


def _warm(checkout: Path, work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "fuzz.cli", "warm", *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)


def warm_pythonpath(checkout: Path, work: Path, timeout: float) -> tuple[str, float, str]:
    """A warm server started with PYTHONPATH=B (``cand`` is vLLM's split), then a run with PYTHONPATH=A
    (``cand`` is the pre-#51113 split): a cold run finds the seed bug (exit 1)."""
    for name, body in (("A", inspect.getsource(_pre_51113_split).replace("_pre_51113_split", "split", 1)),
                       ("B", "def split(self, request, n, a=0, b=0):\n    from vllm.v1.core.sched.scheduler import "
                             "Scheduler\n    return Scheduler.__dict__['_mamba_block_aligned_split'](self, request, n, a, b)\n")):
        (work / name).mkdir()
        (work / name / "cand.py").write_text("from typing import Any\n" + body)
    base = {**os.environ, **ENV, **CURRENT_ENV, "GDNFUZZ_CACHE_DIR": str(work / "cache")}
    _warm(checkout, work, {**base, "PYTHONPATH": f"{checkout}{os.pathsep}{work / 'B'}"}, "--idle", "300")
    try:
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-P", "-m", "fuzz.cli", "run", "--candidate", "cand:split", "--runs", "20",
                               "--max-time", "0", "--corpus", str(seed_corpus(work, "seeds")), "--crashes",
                               str(work / "crashes"), "--json"], cwd=work, capture_output=True, text=True,
                              env={**base, "PYTHONPATH": f"{checkout}{os.pathsep}{work / 'A'}"}, timeout=timeout)
        took = time.monotonic() - start
    finally:
        _warm(checkout, work, base | {"PYTHONPATH": str(checkout)}, "--stop")
    record = json.loads((done.stdout.strip().splitlines() or ["{}"])[-1] or "{}")
    forked = "forked from the warm server" in str(record.get("startup"))
    return str(done.returncode), took, (f"{'FAKED PASS' if done.returncode == 0 else 'no fake'}: "
                                        f"{'forked' if forked else 'cold'}, {len(record.get('signatures', []))} "
                                        "signature(s)")


def warm_killed(checkout: Path, work: Path, timeout: float) -> tuple[str, float, str]:
    """A run of a correct candidate (vllm) forked from a warm server that is killed mid-run."""
    env = {**os.environ, **ENV, **CURRENT_ENV, "GDNFUZZ_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(checkout)}
    server = json.loads(_warm(checkout, work, env, "--idle", "300", "--json").stdout or "{}")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-P", "-m", "fuzz.cli", "run", "--candidate", "vllm", "--max-time", "40",
                             "--corpus", str(seed_corpus(work, "seeds")), "--crashes", str(work / "crashes"), "--json"],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(15)
    with contextlib.suppress(OSError, KeyError):
        os.kill(int(server["pid"]), 9)
    out, _ = proc.communicate(timeout=timeout)
    took = time.monotonic() - start
    record = json.loads((out.strip().splitlines() or ["{}"])[-1] or "{}")
    crashes = sorted(d.name for d in (work / "crashes").glob("worker-crash-*"))
    negative = re.findall(r"[a-z ]+ -\d+\.\ds", str(record.get("startup", "")))
    return str(proc.returncode), took, (f"{'FAKED FINDING' if proc.returncode else 'no finding'}: "
                                        f"{len(crashes)} worker-crash bundle(s); start-up phases "
                                        f"{'NEGATIVE: ' + ', '.join(p.strip() for p in negative) if negative else 'all >= 0'}")


WARM_CASES: dict[str, Callable[[Path, Path, float], tuple[str, float, str]]] = {
    "server under PYTHONPATH=B, run under A | run": warm_pythonpath,
    "server killed mid-run | run": warm_killed,
}

CURRENT_ENV: dict[str, str] = {}  # LONG_ENV while issue 34's cases run
GROUPS = {"forge": FORGE_CASES, "data": DATA_CASES, "escape": ESCAPE_CASES, "warm": WARM_CASES}
BAD = ("FAKED", "CODE RAN", "WRITTEN", "REWRITTEN", "ALIVE", "NEGATIVE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", default=str(REPO), help="the gdnfuzz checkout whose CLI runs (default this)")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds before a command is killed")
    parser.add_argument("--groups", default="exit-loop," + ",".join(GROUPS),
                        help=f"exit-loop (issue 24's), {', '.join(GROUPS)} (issue 34's)")
    parser.add_argument("--acts", default=",".join(ACTS))
    parser.add_argument("--places", default=",".join(PLACES))
    parser.add_argument("--commands", default=",".join(COMMANDS))
    args = parser.parse_args()
    ambient()
    checkout = Path(args.checkout).resolve()
    theirs = checkout / own_seed_case().relative_to(REPO)
    if theirs.is_file():
        SEED.append(theirs)
    print(f"gdnfuzz at {checkout}; {', '.join(f'{k}={v}' for k, v in ENV.items())} (issue 34's groups: "
          f"{', '.join(f'{k}={v}' for k, v in LONG_ENV.items())}); killed after {args.timeout:g} s\n")
    print("| candidate | command | exit | s | what happened |\n|---|---|---|---|---|")
    groups = args.groups.split(",")
    passes, bad = 0, 0
    if "exit-loop" in groups:
        for act in args.acts.split(","):
            for place in args.places.split(","):
                for command in args.commands.split(","):
                    with tempfile.TemporaryDirectory(prefix="hostile-") as work:
                        code, took, written = COMMANDS[command](checkout, Path(work), act, place, args.timeout)
                    passes += code == "0" and not written.startswith("regression range recorded")
                    print(f"| {act} in {place} | {command} | {code} | {took:.0f} | {written} |", flush=True)
    CURRENT_ENV.update(LONG_ENV)
    for group in (g for g in groups if g in GROUPS):
        for name, case in GROUPS[group].items():
            with tempfile.TemporaryDirectory(prefix="hostile-") as work:
                try:
                    code, took, what = case(checkout, Path(work), args.timeout)
                except subprocess.TimeoutExpired:
                    code, took, what = f"killed at {args.timeout:g} s", args.timeout, "timed out"
            bad += any(word in what for word in BAD)
            candidate, _, command = name.partition(" | ")
            print(f"| {group}: {candidate} | {command} | {code} | {took:.0f} | {what} |", flush=True)
    print(f"\nfaked passes (exit-loop): {passes}; forged verdicts, code run from data, escapes, warm faults: {bad}")


if __name__ == "__main__":
    main()
