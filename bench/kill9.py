"""kill -9 at random points of ``gdnfuzz run`` with findings: does every file on disk stay valid?

Repeats ``--kills`` times, on one corpus and one crash store: start ``gdnfuzz run --candidate
pre-51113`` (the seed bug is found within seconds, so findings are being written), wait a random
time, SIGKILL its whole process group (workers, reducer), then check what is on disk:

- every bundle (a directory holding ``verdict.json``, raw or minimized) loads with
  ``fuzz.store.bundle.load_bundle``;
- every committed corpus file (``regressions/``, ``seeds/``) loads with ``load_scenario``;
- stray temporary files of the atomic write (``.NAME.HEX.tmp``) are counted: a kill between create
  and rename leaves one, and it must never be mistaken for a file (readers ignore dot-files).

Then ``--campaign-kills`` times the same for ``gdnfuzz campaign`` (Ray), whose stats file must read
back with ``fuzz.store.stats.read_stats``. Prints one line per kill and a total; asserts nothing.
Run: ``.venv/bin/python bench/kill9.py [--kills 10] [--campaign-kills 2] [--seed 1] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GDNFUZZ = str(Path(sys.executable).with_name("gdnfuzz"))


def check(corpus: Path, crashes: Path, stats: Path | None) -> tuple[int, int, int, list[str]]:
    """(bundles, corpus files, stray temporary files, problems) of what is on disk now."""
    from fuzz.errors import InputError
    from fuzz.model.scenario import load_scenario
    from fuzz.store.bundle import load_bundle
    from fuzz.store.stats import read_stats

    problems: list[str] = []
    bundles = [p.parent for p in crashes.rglob("verdict.json")]
    for bundle in bundles:
        try:
            load_bundle(bundle)
        except InputError as exc:
            problems.append(f"bundle {bundle}: {exc}")
    files = [p for d in ("regressions", "seeds") for p in (corpus / d).glob("*.json")]
    for path in files:
        try:
            load_scenario(path)
        except InputError as exc:
            problems.append(f"corpus {path}: {exc}")
    if stats is not None and stats.exists():
        try:
            read_stats(stats)
        except InputError as exc:
            problems.append(f"stats {stats}: {exc}")
    strays = sum(1 for root in (corpus, crashes) for p in root.rglob(".*.tmp"))
    return len(bundles), len(files), strays, problems


def kill_once(argv: list[str], after: float, log: Path) -> float:
    """Start ``argv`` in a process group of its own, SIGKILL the group ``after`` seconds later."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        start = time.monotonic()
        try:
            proc.wait(timeout=after)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kills of gdnfuzz run")
    parser.add_argument("--campaign-kills", type=int, default=2, help="kills of gdnfuzz campaign")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the kill times")
    parser.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    rng = random.Random(args.seed)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gdnfuzz-kill9-"))
    corpus, crashes, stats, log = work / "corpus", work / "crashes", work / "stats.jsonl", work / "log"
    shutil.copytree(ROOT / "corpus", corpus, dirs_exist_ok=True)
    total_problems = 0
    runs = [("run", [GDNFUZZ, "run", "--candidate", "pre-51113", "--corpus", str(corpus), "--crashes",
                     str(crashes), "--max-time", "120", "--minimize-time", "20"], 8.0, 45.0)] * args.kills
    runs += [("campaign", [GDNFUZZ, "campaign", "--fuzzers", "1", "--verifiers", "0", "--candidate", "pre-51113",
                           "--corpus", str(corpus), "--crashes", str(crashes), "--stats", str(stats),
                           "--max-time", "180"], 30.0, 90.0)] * args.campaign_kills
    for i, (name, argv, low, high) in enumerate(runs, 1):
        after = rng.uniform(low, high)
        lived = kill_once(argv, after, log)
        bundles, files, strays, problems = check(corpus, crashes, stats if name == "campaign" else None)
        total_problems += len(problems)
        print(f"kill {i:2d} ({name}, SIGKILL at {lived:5.1f} s): {bundles} bundles, {files} corpus files, "
              f"{strays} stray temporary files, {len(problems)} invalid", flush=True)
        for problem in problems:
            print(f"  INVALID {problem}")
    print(f"{len(runs)} kills ({args.kills} run, {args.campaign_kills} campaign): {total_problems} invalid files"
          f"; work directory {work}")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
