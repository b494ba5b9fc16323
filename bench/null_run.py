"""The null run and the determinism check of the sim tier (issue 2's "done means"), as figures.

1. ``gdnfuzz gen --seed SEED --count COUNT --out DIR --profile PROFILE`` (a workload profile, default
   ``mixed``, every profile in turn; ``prefill`` alone is the generator before profiles; ``chat``, ``agentic``
   and ``batch`` reach long decodes and preemption after decode);
2. ``gdnfuzz replay DIR/*.json --candidate P --reference P --json --fail-on any`` (``--policy P``, default
   vllm): a finding both sides share is a bug of P's own (counted by signature; for vllm, the corpus
   records them); any other finding, correctness or cost, is a false positive of the sim or the oracle
   (its file and signature are printed);
   With ``--knob NAME``, every scenario first has that engine knob moved off its default by the knob
   table's own mutation (``knob-NAME``): the null run of one knob (a knob the installed vLLM lacks is
   refused: it has no mutation there);
3. ``--candidate naive --reference P``: how many scenarios diverge (the canary's detection rate);
   with ``--as-file``, the candidate of 2 and 3 is a user's policy file holding P's (or naive's) split: each run
   is made by its sandbox child and answered from its tape, and the tapes refused are counted;
4. determinism: the seed corpus case replayed ``--repeat`` times in this process gives one verdict
   and one candidate/reference fingerprint pair, and so do two child processes with other
   ``PYTHONHASHSEED`` values.

Prints figures and wall times, asserts nothing. Run:
``.venv/bin/python bench/null_run.py [--count 1000] [--seed 7] [--repeat 100] [--dir DIR] [--policy P] [--profile P]
[--knob NAME] [--as-file]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fuzz.sandbox.tape import TAPE_REFUSED_LINE  # noqa: E402

GDNFUZZ = str(Path(sys.executable).with_name("gdnfuzz"))
SEED_CASE = ROOT / "corpus" / "regressions" / "pr51113-fragmented-first-chunk.json"
FINGERPRINTS = (
    "from fuzz.model.policies import resolve_policy\n"
    "from fuzz.oracle.differential import replay\n"
    "from fuzz.model.scenario import load_scenario\n"
    "import sys\n"
    "s, _ = load_scenario(sys.argv[1])\n"
    "r = replay(s, resolve_policy('pre-51113'), resolve_policy('vllm'))\n"
    "print(r.verdict.status, r.verdict.summary, r.candidate.fingerprint(), r.reference.fingerprint(),\n"
    "      [(e.kind, e.details['amount']) for e in r.verdict.of(\"efficiency\")])\n"
)


def replay_dir(files: list[str], candidate: str, reference: str) -> tuple[int, list[dict], float]:
    start = time.perf_counter()
    proc = subprocess.run([GDNFUZZ, "replay", *files, "--candidate", candidate, "--reference", reference, "--json",
                           "--fail-on", "any", "-v"],
                          capture_output=True, text=True, cwd=ROOT)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 2:
        print(proc.stderr.strip().splitlines()[-1])
    refused = [line for line in proc.stderr.splitlines() if line.startswith(TAPE_REFUSED_LINE)]
    if refused:
        print(f"  tapes refused: {len(refused)}; first: {refused[0][:300]}")
    return proc.returncode, rows, time.perf_counter() - start


def with_knob(files: list[str], knob: str, seed: int) -> None:
    """Each scenario rewritten with ``knob`` off its default, by the knob's own mutation (a few tries)."""
    import random

    from fuzz.model.scenario import Scenario, pretty_json
    from fuzz.search.mutate import MUTATIONS

    mutate, rng = MUTATIONS[f"knob-{knob}"], random.Random(seed)
    values: Counter[str] = Counter()
    for file in files:
        scenario = Scenario.from_dict(json.loads(Path(file).read_text()))
        for _ in range(8):
            if not scenario.engine.at_default(knob):
                break
            scenario = mutate(scenario, rng)
        values[str(getattr(scenario.engine, knob))] += 1
        Path(file).write_text(pretty_json(scenario))
    print(f"--knob {knob}: values {dict(sorted(values.items()))}")


def as_file(directory: Path, policy: str) -> str:
    """Built-in ``policy``'s split as a user's policy file (``FILE:split``), run in its sandbox child."""
    path = directory / f"{policy.replace('-', '_')}_as_file.py"
    path.write_text(f"from fuzz.model.policies import BUILTINS\n\nsplit = BUILTINS[{policy!r}][0]\n")
    return f"{path}:split"


def null_run(out: Path, seed: int, count: int, policy: str, profile: str, knob: str | None,
             files_in: Path | None) -> None:
    start = time.perf_counter()
    subprocess.run([GDNFUZZ, "gen", "--seed", str(seed), "--count", str(count), "--out", str(out), "--profile", profile],
                   check=True, cwd=ROOT, capture_output=True)
    print(f"gen --profile {profile}: {count} scenarios in {time.perf_counter() - start:.1f} s")
    files = sorted(str(p) for p in out.glob("*.json"))
    if knob is not None:
        with_knob(files, knob, seed)
    for name in (policy, "naive"):
        candidate = name if files_in is None else as_file(files_in, name)
        rc, rows, wall = replay_dir(files, candidate, policy)
        verdicts = Counter(r["verdict"] for r in rows)
        print(f"replay --candidate {candidate} --reference {policy}: exit {rc}, {len(rows)} rows, "
              f"{dict(sorted(verdicts.items()))}, {wall:.1f} s ({len(rows) / wall:.1f} scenarios/s)")
        if name == policy:
            own = Counter(r["signature"] for r in rows if r["outcome"] == "known")
            print(f"  {policy}'s own bugs (both sides wrong): {sum(own.values())} scenarios, {dict(own)}")
            false = [r for r in rows if r["outcome"] == "new"]
            print(f"  false positives (a finding of one side only): {len(false)}")
            for r in false:
                print(f"  FALSE POSITIVE {r['file']}: {r['signature']}: {r['kind']} {'; '.join(r['efficiency'])}")
        else:
            diverged = [r for r in rows if r["verdict"] == "diverged"]
            kinds = Counter(r["kind"].split(" ", 1)[0] if r["kind"] else "" for r in diverged)
            print(f"  diverged {len(diverged)}/{len(rows)}; first-finding summaries by first word: {dict(kinds)}")


def determinism(repeat: int) -> None:
    from fuzz.model.policies import resolve_policy
    from fuzz.model.scenario import load_scenario
    from fuzz.oracle.differential import replay

    scenario, _ = load_scenario(SEED_CASE)
    candidate, reference = resolve_policy("pre-51113"), resolve_policy("vllm")
    seen: Counter[tuple[str, str, str, str, tuple[str, ...]]] = Counter()
    start = time.perf_counter()
    for _ in range(repeat):
        r = replay(scenario, candidate, reference)
        costs = tuple(f"{e.kind}:{e.details['amount']}" for e in r.verdict.of("efficiency"))
        seen[(r.verdict.status, r.verdict.summary, r.candidate.fingerprint(), r.reference.fingerprint(), costs)] += 1
    print(f"determinism: {repeat} in-process replays of {SEED_CASE.name} in {time.perf_counter() - start:.1f} s: "
          f"{len(seen)} distinct (verdict, kind, fingerprints): {dict(seen)}")
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run([sys.executable, "-c", FINGERPRINTS, str(SEED_CASE)], capture_output=True,
                              text=True, cwd=ROOT, env=env)
        line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-200:]
        print(f"  child process PYTHONHASHSEED={hash_seed}: {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--dir", help="where to write the scenarios (default: a temporary directory)")
    parser.add_argument("--policy", default="vllm", help="the policy run against itself (default vllm)")
    parser.add_argument("--profile", default="mixed",
                        help="the workload profile scenarios are drawn from (default mixed: `gdnfuzz gen`'s)")
    parser.add_argument("--knob", help="move this engine knob off its default in every scenario (its own mutation)")
    parser.add_argument("--as-file", action="store_true",
                        help="the candidates as users' policy files (sandboxed, answered from their tapes)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdnfuzz-null-") as tmp:
        files_in = Path(tmp) / "policies" if args.as_file else None
        if files_in is not None:
            files_in.mkdir()
        scenarios = Path(args.dir) if args.dir else Path(tmp) / "scenarios"
        null_run(scenarios, args.seed, args.count, args.policy, args.profile, args.knob, files_in)
    determinism(args.repeat)


if __name__ == "__main__":
    main()
