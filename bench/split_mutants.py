"""The generated mutation benchmark: every first-order mutant of the installed split, and what kills it.

Mutants come from ``bench/mutants/generated.py`` (the standard operators of mutation testing applied to
the installed ``Scheduler._mamba_block_aligned_split``). Stages, each timed:

1. **sample**: split calls recorded from sim runs of generated scenarios of every workload profile,
   under vLLM's split and two other policies (``pre-51113``, ``naive``: states vLLM's own split never
   reaches), each call kept as a snapshot of what the split reads of the scheduler and the request;
2. **triage**: ``plus1``/``minus1`` mutants of an expression that is not an integer on the sample are
   dropped (counted); a mutant whose answers equal the original's on every sampled call goes to the
   exhaustive check (``workers.sim.equivalence``): *shown equivalent* there, it is set aside; otherwise it
   is judged with the rest;
3. **corpus**: each committed corpus file replayed on the sim tier, the mutant against ``vllm``; a file
   kills it where the mutant has a finding of its own of any class (``--fail-on any``);
4. **generated**: a fixed set of generated scenarios (``--generated`` per profile, every profile, seed
   ``--seed``), the same way;
5. **grid**: each mutant still alive is checked exhaustively; shown equivalent, it leaves the score;
6. **reach**: each generated scenario run once under vLLM's split, every mutant still alive asked at each
   of its calls: the scenarios where some call is answered differently (the mutant's run departs there);
7. **fuzz**: ``gdnfuzz run --fail-on any --max-time FUZZ_TIME`` for the rest. A survivor the generated set
   never reached is a *reach gap*; one it reached is *unflagged* (its runs depart and no oracle finds them
   worse; how each run's costs compare with the reference's is shown). Each is shown with the first grid
   call it answers differently.

Score: killed / (judged - shown equivalent). ``--table FILE`` writes the result as a page
(``bench/split_mutants-<vLLM version>.md``); ``--records FILE`` writes every mutant's verdict and the grid verdicts,
compactly (``bench/split_mutants-<vLLM version>.json``, committed beside the page); ``--resume FILE`` reuses the
records and grid verdicts of an earlier ``--json`` or ``--records``. ``--first-kill`` ends stages 3-4 at a mutant's
first killing scenario (the kill matrix then holds that one; the counts by stage are the same).

Reference and truth runs are computed once per scenario per worker process (they do not depend on the
mutant); each mutant's runs are in-process (these mutants are our own code), ``--jobs`` processes.

Prints the counts, the kill matrix (one row a mutant: corpus files that kill it, generated scenarios
that kill it, fuzz), the candidate-side signatures each killed mutant gets over the corpus and generated
set, the pairs of mutants on different lines that share a signature (with examples), the survivors with
their diff, and the wall time of each stage. ``--json FILE`` writes everything (the whole matrix).
Asserts nothing.

    .venv/bin/python bench/split_mutants.py --jobs 2 --json /tmp/mutants.json
    .venv/bin/python bench/split_mutants.py --limit 40 --mutant-seed 1   # a seeded sample of the mutants
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "mutants"))

import generated  # noqa: E402

from bench.load import busy_loops  # noqa: E402
from fuzz.errors import ConfigRejected  # noqa: E402
from fuzz.model.policies import Policy, resolve_policy  # noqa: E402
from fuzz.model.scenario import Scenario, load_scenario  # noqa: E402
from fuzz.oracle.differential import replay  # noqa: E402
from fuzz.oracle.verdict import FailOn, finding_signature, outcome  # noqa: E402
from workers.sim.equivalence import answer, compare, reads  # noqa: E402

CORPUS = ROOT / "corpus" / "regressions"
PROFILES = ("prefill", "chat", "agentic", "batch")
SAMPLE_POLICIES = ("vllm", "pre-51113", "naive")
GDNFUZZ = str(Path(sys.executable).with_name("gdnfuzz"))


# ---------------------------------------------------------------- the sample


def _snapshot(obj: Any, chains: list[tuple[str, ...]]) -> SimpleNamespace:
    root = SimpleNamespace()
    for chain in chains:
        node, value = root, obj
        for k, part in enumerate(chain):
            value = getattr(value, part)
            if k == len(chain) - 1:
                setattr(node, part, value)
            else:
                node = getattr(node, part, None) or _child(node, part)
    return root


def _child(node: SimpleNamespace, part: str) -> SimpleNamespace:
    child = SimpleNamespace()
    setattr(node, part, child)
    return child


Call = tuple[SimpleNamespace, SimpleNamespace, tuple[int, int, int]]


def _key(call: Call) -> str:
    return repr((sorted(_flat(call[0])), sorted(_flat(call[1])), call[2]))


def _flat(ns: SimpleNamespace, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in vars(ns).items():
        if isinstance(value, SimpleNamespace):
            yield from _flat(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", value


def _scenarios(profile: str, seed: int, count: int) -> list[Scenario]:
    from fuzz.search.generate import random_scenario
    from fuzz.search.profiles import PROFILES as BY_NAME

    rng = random.Random(seed)
    return [random_scenario(rng, BY_NAME[profile]) for _ in range(count)]


def record_sample(count: int, seed: int) -> list[Call]:
    """Distinct split calls (snapshots) from sim runs of ``count`` generated scenarios per profile."""
    from fuzz.tiers import executor_for

    self_chains, fields = reads(generated.installed_split())
    request_chains = [(name,) for name in fields]
    calls: dict[str, Call] = {}
    executor = executor_for("sim")
    for spec in SAMPLE_POLICIES:
        inner = resolve_policy(spec).split

        def recording(scheduler: Any, request: Any, *args: int, inner: Any = inner) -> int:
            full = (tuple(args) + (0, 0, 0))[:3]
            call = (_snapshot(scheduler, self_chains), _snapshot(request, request_chains), full)
            calls.setdefault(_key(call), call)
            return inner(scheduler, request, *args)

        policy = Policy(f"recording {spec}", spec, recording)
        for profile in PROFILES:
            for scenario in _scenarios(profile, seed, count):
                try:
                    executor.run(scenario, policy)
                except ConfigRejected:
                    continue
    return list(calls.values())


def _answers(split: Any, calls: list[Call]) -> list[Any]:
    return [answer(split, scheduler, request, args) for scheduler, request, args in calls]


# ---------------------------------------------------------------- kill stages


@dataclass
class Kill:
    """One scenario's verdict on one mutant: the signature (``--fail-on any``), whether it is the
    mutant's own (``new``), and the root cause / symptom behind the name."""

    scenario: str
    signature: str
    symptom: str = ""
    cause: dict[str, Any] | None = None


@dataclass
class Record:
    name: str
    operator: str
    line: int
    before: str
    after: str
    diff: str
    status: str = "alive"  # equivalent | killed | reach-gap | unflagged | alive (not checked on the grid)
    killed_by: str = ""  # corpus | generated | fuzz
    corpus: list[Kill] = field(default_factory=list)
    generated: list[Kill] = field(default_factory=list)
    fuzz: list[str] = field(default_factory=list)  # candidate-side signatures of the fuzz run
    seconds: float = 0.0
    grid: str = ""  # the exhaustive check: the first grid call answered differently ("" when none)
    fuzzed: bool = False
    reached: list[str] = field(default_factory=list)  # generated scenarios with a call it answers differently
    departures: list[str] = field(default_factory=list)  # how its runs of those compare with the reference's


SURVIVING = ("alive", "reach-gap", "unflagged")

_WORKER: dict[str, Any] = {}


def _worker_init(generated_count: int, seed: int, named: int, first_kill: bool = False) -> None:
    import logging

    logging.disable(logging.WARNING)
    corpus = [(p.name, load_scenario(p)[0]) for p in sorted(CORPUS.glob("*.json"))]
    gen = [(f"{profile}-{i}", s) for profile in PROFILES
           for i, s in enumerate(_scenarios(profile, seed + 1, generated_count))]
    _WORKER.update(corpus=corpus, generated=gen, by_label=dict(gen), reference=resolve_policy("vllm"), runs={},
                   named=named, first_kill=first_kill)


def _cached_runs(label: str, scenario: Scenario) -> tuple[Any, Any]:
    from fuzz.tiers import executor_for

    runs = _WORKER["runs"]
    if label not in runs:
        executor = executor_for("sim")
        runs[label] = (executor.run(scenario, _WORKER["reference"]), executor.truth(scenario))
    return runs[label]


def _policy(mutant: generated.Mutant) -> Policy:
    return Policy(mutant.name, f"bench/mutants/generated.py:{mutant.name}", mutant.split)


def _replayed(candidate: Policy, label: str, scenario: Scenario, causes: bool) -> Any:
    reference_run, truth_run = _cached_runs(label, scenario)
    return replay(scenario, candidate, _WORKER["reference"], "sim", causes=causes,
                  reference_run=reference_run, truth_run=truth_run)


def _kills(candidate: Policy, scenarios: list[tuple[str, Scenario]], most: int | None = None) -> list[Kill]:
    """The scenarios where ``candidate`` has a finding of its own (the first ``most`` of them), named without
    their root cause (its search costs runs; :func:`_named` names a few)."""
    found: list[Kill] = []
    for label, scenario in scenarios:
        if most is not None and len(found) >= most:
            break
        try:
            replayed = _replayed(candidate, label, scenario, causes=False)
        except ConfigRejected:
            continue
        sig = finding_signature(replayed.verdict, scenario, replayed.candidate, FailOn("any"))
        if outcome(sig) == "new":
            found.append(Kill(label, sig))
    return found


def _named(candidate: Policy, kills: list[Kill], scenarios: dict[str, Scenario], most: int) -> None:
    """Name up to ``most`` of ``kills`` (spread evenly) as ``gdnfuzz run`` would: signature, symptom, cause."""
    from fuzz.oracle.classes.correctness import FINDING_CLASS as CORRECTNESS

    for kill in kills[:: max(1, -(-len(kills) // most))]:
        scenario = scenarios[kill.scenario]
        replayed = _replayed(candidate, kill.scenario, scenario, causes=True)
        kill.signature = finding_signature(replayed.verdict, scenario, replayed.candidate, FailOn("any"))
        kill.symptom = CORRECTNESS.symptom(replayed.verdict, scenario, replayed.candidate)
        cause = replayed.verdict.root_cause
        kill.cause = vars(cause) if cause else None


def judge_mutant(name: str) -> Record:
    started = time.perf_counter()
    mutant = generated.by_name()[name]
    candidate = _policy(mutant)
    record = Record(mutant.name, mutant.operator, mutant.line, mutant.before, mutant.after, mutant.diff)
    first = 1 if _WORKER["first_kill"] else None
    record.corpus = _kills(candidate, _WORKER["corpus"], first)
    record.generated = [] if first and record.corpus else _kills(candidate, _WORKER["generated"], first)
    _named(candidate, record.corpus + record.generated, dict(_WORKER["corpus"] + _WORKER["generated"]),
           _WORKER["named"])
    if record.corpus or record.generated:
        record.status, record.killed_by = "killed", "corpus" if record.corpus else "generated"
    record.seconds = time.perf_counter() - started
    return record


def fuzz_run(name: str, seconds: int, seed: int, gdnfuzz: str = GDNFUZZ) -> tuple[list[str], int]:
    """``gdnfuzz run --fail-on any`` against mutant ``name``, from an empty corpus, into a scratch directory
    (``gdnfuzz``: the command of this checkout or another's): the candidate-side signatures it stored, and
    the executions its last status line counted."""
    with tempfile.TemporaryDirectory(prefix="gdnfuzz-mutant-") as scratch:
        crashes = Path(scratch) / "crashes"
        done = subprocess.run([gdnfuzz, "run", "--candidate", f"{ROOT}/bench/mutants/generated.py:{name}",
                               "--reference", "vllm", "--fail-on", "any", "--max-time", str(seconds),
                               "--seed", str(seed), "--corpus", str(Path(scratch) / "corpus"), "--crashes",
                               str(crashes)], cwd=scratch, capture_output=True, text=True)
        execs = re.findall(r"\bexecs (\d+)", done.stderr)
        return candidate_signatures(crashes), int(execs[-1]) if execs else 0


def fuzz_mutant(record: Record, seconds: int, seed: int) -> None:
    record.fuzz, record.fuzzed = fuzz_run(record.name, seconds, seed)[0], True
    if record.fuzz:
        record.status, record.killed_by = "killed", "fuzz"


def runs_of_killed(path: str, sample: int, sample_seed: int, seconds: int, seed: int, commands: list[str],
                   busy: int = 0) -> None:
    """Signatures per killed mutant in a ``seconds`` run each: a seeded sample of the mutants a previous
    ``--json`` killed, each run by every command of ``commands`` (e.g. two checkouts' ``gdnfuzz``) at the
    same time, so that each pair shares the machine's load, with ``busy`` busy loops beside."""
    killed = sorted(r["name"] for r in json.loads(Path(path).read_text())["records"] if r["status"] == "killed")
    chosen = sorted(random.Random(sample_seed).sample(killed, min(sample, len(killed))))
    counts: dict[str, list[int]] = {c: [] for c in commands}
    with ProcessPoolExecutor(len(commands)) as pool, busy_loops(busy):
        for name in chosen:
            found = list(pool.map(fuzz_run, *zip(*[(name, seconds, seed, c) for c in commands], strict=True)))
            for command, (sigs, _) in zip(commands, found, strict=True):
                counts[command].append(len(sigs))
            print(f"  {name}: " + "; ".join(f"{len(sigs)} in {execs} execs: {' '.join(sigs)}" for sigs, execs in found),
                  flush=True)
    for command, n in counts.items():
        killed_here = [k for k in n if k]
        small = sum(1 for k in killed_here if k <= 2)
        print(f"{command}: {len(killed_here)} of {len(n)} killed in {seconds} s; signatures per killed mutant: "
              f"{distribution(killed_here)}; 1 or 2: {small} ({100 * small / max(1, len(killed_here)):.0f}%)")


def candidate_signatures(crashes: Path) -> list[str]:
    """The candidate-side signatures a run stored (bundle directories; raw findings are not bundles)."""
    if not crashes.is_dir():
        return []
    return sorted(p.name for p in crashes.iterdir()
                  if p.is_dir() and p.name != "raw" and outcome(p.name) == "new")


def grid_check(name: str) -> tuple[str, bool, str, int, float]:
    """The exhaustive check (``workers.sim.equivalence``) of mutant ``name`` against the installed split:
    (name, equivalent, the first differing call, calls made, seconds)."""
    check = compare(generated.by_name()[name].split, generated.installed_split())
    difference = check.difference.describe() if check.difference else ""
    return name, check.equivalent, difference, check.calls, check.seconds


def grid_checks(names: list[str], pool: ProcessPoolExecutor) -> dict[str, tuple[bool, str]]:
    """``grid_check`` of every name in ``pool`` (whose workers keep the reference's answers); one line each."""
    found = {}
    for name, equivalent, difference, calls, seconds in pool.map(grid_check, names):
        found[name] = (equivalent, difference)
        print(f"  grid {name}: {'equivalent' if equivalent else 'differs'} ({calls} calls, {seconds:.1f} s)",
              flush=True)
    return found


def reaching(names: list[str]) -> dict[str, list[str]]:
    """For each mutant of ``names``: the generated scenarios of this process's set (``_worker_init``) whose run
    under vLLM's split makes a call the mutant answers differently."""
    from fuzz.tiers import executor_for

    splits = {name: generated.by_name()[name].split for name in names}
    original = generated.installed_split()
    found: dict[str, list[str]] = {name: [] for name in names}
    executor = executor_for("sim")
    for label, scenario in _WORKER["generated"]:
        departed: set[str] = set()

        def asking(scheduler: Any, request: Any, *args: int, departed: set[str] = departed) -> int:
            expected = original(scheduler, request, *args)
            departed.update(n for n, split in splits.items()
                            if n not in departed and answer(split, scheduler, request, args) != expected)
            return expected

        try:
            executor.run(scenario, Policy("asking the survivors", "vllm", asking))
        except ConfigRejected:
            continue
        for name in departed:
            found[name].append(label)
    return found


def departure(name: str, label: str) -> str:
    """How the mutant's run of generated scenario ``label`` compares with the reference's: its findings, or the
    efficiency oracle's three costs (``fuzz.oracle.efficiency``) over the requests both runs can compare."""
    from fuzz.model.cost import run_cost
    from fuzz.oracle.efficiency import comparable, costs

    scenario = _WORKER["by_label"][label]
    replayed = _replayed(_policy(generated.by_name()[name]), label, scenario, causes=False)
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, FailOn("any"))
    if outcome(sig) == "new":
        return f"{label}: {sig}"
    mine, theirs = run_cost(scenario, replayed.candidate), run_cost(scenario, replayed.reference)
    pairs = comparable(mine, theirs)
    candidate, reference = costs(mine, [c for c, _ in pairs]), costs(theirs, [r for _, r in pairs])
    more, fewer = sorted(candidate.worse(reference)), sorted(reference.worse(candidate))
    if not more and not fewer:
        return f"{label}: the same costs"
    return f"{label}: " + "; ".join(part for part in (f"more {', '.join(more)}" if more else "",
                                                     f"fewer {', '.join(fewer)}" if fewer else "") if part)


def resumed(path: str | None) -> dict[str, Record]:
    """The records an earlier ``--json`` or ``--records`` run wrote (its final file, else its per-line one), by
    name; a mutant the installed split no longer has is dropped, and the text of each comes from its mutant."""
    if not path:
        return {}
    finished = _earlier(path)
    rows = finished["records"] if finished else \
        [json.loads(line) for line in Path(path + "l").read_text().splitlines() if line.strip()]
    rows = [{**r, "status": "alive"} if r["status"] in SURVIVING and not r.get("fuzzed") else r for r in rows]
    mutants = generated.by_name()
    return {r["name"]: Record(**{"fuzzed": bool(finished), **_text_of(mutants[r["name"]]), **r,
                                 "corpus": [Kill(**k) for k in r.get("corpus", [])],
                                 "generated": [Kill(**k) for k in r.get("generated", [])]})
            for r in rows if r["name"] in mutants}


def _text_of(mutant: generated.Mutant) -> dict[str, Any]:
    return {"operator": mutant.operator, "line": mutant.line, "before": mutant.before, "after": mutant.after,
            "diff": mutant.diff}


def records_text(records: list[Record], checked: dict[str, tuple[bool, str]]) -> str:
    """``--records``: one JSON object, a line a mutant (so that a rerun's change reads as a diff)."""
    rows = [json.dumps(compact(r)) for r in records]
    grid = [f"{json.dumps(name)}: {json.dumps(verdict)}" for name, verdict in sorted(checked.items())]
    return '{"records": [\n' + ",\n".join(rows) + '\n],\n"grid_on_sample_equal": {\n' + ",\n".join(grid) + "\n}}\n"


def compact(record: Record) -> dict[str, Any]:
    """What ``--records`` keeps of a record: its verdict, its first kill of each stage, the grid's call, the reach
    and fuzz results; the mutant's text is its name's (``generated.by_name``)."""
    kept = {"name": record.name, "status": record.status, "killed_by": record.killed_by, "fuzzed": record.fuzzed}
    kept |= {k: [vars(kill) | {"cause": None} for kill in getattr(record, k)[:1]] for k in ("corpus", "generated")
             if getattr(record, k)}
    kept |= {k: getattr(record, k) for k in ("fuzz", "grid", "reached", "departures") if getattr(record, k)}
    return kept


def _earlier(path: str | None) -> dict[str, Any]:
    """What an earlier ``--json`` run wrote when it finished; empty where it did not (or none is named)."""
    return json.loads(Path(path).read_text()) if path and Path(path).is_file() else {}


def resumed_grid(path: str | None, names: list[str]) -> dict[str, tuple[bool, str]]:
    """The grid verdicts an earlier finished ``--json`` run reached for those of ``names`` equal on its sample."""
    earlier, wanted = _earlier(path).get("grid_on_sample_equal", {}), set(names)
    return {name: (same, difference) for name, (same, difference) in earlier.items() if name in wanted}


# ---------------------------------------------------------------- report


def signatures_of(record: Record) -> set[str]:
    """The names of the kills named in full (and the fuzz run's)."""
    return {k.signature for k in record.corpus + record.generated if k.cause is not None or k.symptom} | \
        set(record.fuzz)


def shared_across_lines(records: list[Record]) -> list[tuple[str, str, str]]:
    """(signature, mutant, mutant) for each pair of killed mutants on different lines sharing a signature."""
    by_signature: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        for sig in signatures_of(r):
            by_signature[sig].append(r)
    pairs = set()
    for sig, holders in by_signature.items():
        for i, a in enumerate(holders):
            for b in holders[i + 1:]:
                if a.line != b.line:
                    pairs.add((sig, *sorted((a.name, b.name))))
    return sorted(pairs)


def distribution(counts: list[int]) -> str:
    histogram = Counter(counts)
    return ", ".join(f"{n}: {histogram[n]}" for n in sorted(histogram))


def score(records: list[Record]) -> str:
    """killed / (judged - shown equivalent), as a percentage."""
    killed = sum(1 for r in records if r.status == "killed")
    counted = sum(1 for r in records if r.status != "equivalent")
    return f"{killed}/{counted} ({100 * killed / max(1, counted):.1f}%)"


def print_report(records: list[Record], stages: dict[str, float], total: int, not_integer: int, equivalent: int,
                 fuzzed: int) -> None:
    killed = [r for r in records if r.status == "killed"]
    by = Counter(r.killed_by for r in killed)
    alive = [r for r in records if r.status in SURVIVING]
    print(f"\nmutants made: {total}; not integer expressions: {not_integer}; shown equivalent before judging: "
          f"{equivalent}; judged: {len(records)}")
    print(f"killed by the corpus: {by['corpus']}; by the generated set (not the corpus): {by['generated']}; "
          f"by fuzzing ({fuzzed} fuzzed): {by['fuzz']}; shown equivalent after: "
          f"{sum(1 for r in records if r.status == 'equivalent')}; surviving: {len(alive)}; score {score(records)}")
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items()))
    print("\nkill matrix (corpus files / generated scenarios that kill it; fuzz: signatures found)")
    print(f"{'mutant':<24} {'op':<12} {'corpus':>6} {'gen':>5} {'fuzz':>5}  signatures")
    for r in records:
        print(f"{r.name:<24} {r.operator:<12} {len(r.corpus):>6} {len(r.generated):>5} "
              f"{len(r.fuzz) if r.killed_by == 'fuzz' else '-':>5}  {len(signatures_of(r))} "
              f"{' '.join(sorted(signatures_of(r)))[:150]}")
    counts = [len(signatures_of(r)) for r in killed]
    if counts:
        small = sum(1 for n in counts if n <= 2)
        print(f"\ncandidate-side signatures per killed mutant (corpus + generated set): {distribution(counts)}; "
              f"1 or 2: {small} of {len(counts)} ({100 * small / len(counts):.0f}%)")
    pairs = shared_across_lines(killed)
    print(f"pairs of killed mutants on different lines sharing a signature: {len(pairs)}")
    for sig, a, b in pairs[:: max(1, len(pairs) // 5)][:5]:
        print(f"  {sig}: {a} / {b}")
    print(f"\nsurvivors ({len(alive)}):")
    for r in alive:
        print(r.diff)
        print(f"  first grid call answered differently: {r.grid or '(not checked)'}")
        print(f"  generated scenarios reaching a different answer: {', '.join(r.reached) or 'none'}")
        for line in r.departures:
            print(f"    {line}")


def table(records: list[Record], stages: dict[str, float], total: int, not_integer: int, equivalent: int) -> str:
    """The result as a small Markdown page: counts, score, stage times, every survivor with its grid call."""
    import vllm

    by = Counter(r.killed_by for r in records if r.status == "killed")
    status = Counter(r.status for r in records)
    lookahead = [r for r in records if "lookahead" in r.before]
    rows = [
        f"# The split's mutation benchmark on vLLM {vllm.__version__}",
        "",
        "Rewritten by `bench/split_mutants.py --table` (" + " ".join(sys.argv[1:]) + ").",
        "",
        "| made | not on integers | shown equivalent | judged | killed: corpus | generated | fuzz "
        "| equivalent after | surviving | score |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {total} | {not_integer} | {equivalent} | {len(records)} | {by['corpus']} | {by['generated']} "
        f"| {by['fuzz']} | {status['equivalent']} | {sum(status[s] for s in SURVIVING)} | {score(records)} |",
        "",
        "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in stages.items())
        + f"; {sum(stages.values()) / 60:.0f} min in all.",
        "",
        f"Mutants of the lookahead lines: {len(lookahead)} judged"
        + "".join(f", {n} {k}" for k, n in sorted(Counter(r.status for r in lookahead).items())) + ".",
        "",
        "## Survivors",
        "",
    ]
    for r in records:
        if r.status in SURVIVING:
            rows += [f"- `{r.name}` ({r.status}): `{r.before.strip()[:80]}` -> `{r.after.strip()[:80]}`",
                     f"  first grid call answered differently: {r.grid or '(not checked)'}",
                     f"  generated scenarios reaching a different answer: {', '.join(r.reached) or 'none'}",
                     *(f"  - {line}" for line in r.departures)]
    equivalent_after = [r.name for r in records if r.status == "equivalent"]
    if equivalent_after:
        rows += ["", "## Shown equivalent after judging", "", ", ".join(f"`{n}`" for n in equivalent_after)]
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=150, help="generated scenarios per profile for the sample")
    parser.add_argument("--generated", type=int, default=20, help="generated scenarios per profile to kill with")
    parser.add_argument("--named", type=int, default=12,
                        help="killing scenarios per mutant named in full (root cause search included)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--fuzz-time", type=int, default=60, help="seconds of `gdnfuzz run` per surviving mutant")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    parser.add_argument("--limit", type=int, default=0, help="judge a seeded sample of this many mutants (0: all)")
    parser.add_argument("--mutant-seed", type=int, default=0)
    parser.add_argument("--json", help="write every record here")
    parser.add_argument("--resume", metavar="JSON", help="reuse the records of an earlier --json run (not re-judged)")
    parser.add_argument("--table", metavar="FILE", help="write the result table here (bench/split_mutants-*.md)")
    parser.add_argument("--records", metavar="FILE",
                        help="write every verdict here, compactly, to --resume from (bench/split_mutants-*.json)")
    parser.add_argument("--first-kill", action="store_true",
                        help="stop the corpus and generated stages at each mutant's first kill")
    parser.add_argument("--runs-of-killed", metavar="JSON",
                        help="instead: a --run-time run of a sample of the mutants this earlier --json killed")
    parser.add_argument("--run-sample", type=int, default=30)
    parser.add_argument("--run-time", type=int, default=90)
    parser.add_argument("--busy", type=int, default=0, metavar="N", help="busy loops beside the --runs-of-killed runs")
    parser.add_argument("--command", action="append", default=[],
                        help="the gdnfuzz command to run them with (repeat for several checkouts; default this one)")
    args = parser.parse_args()
    if args.runs_of_killed:
        runs_of_killed(args.runs_of_killed, args.run_sample, args.mutant_seed, args.run_time, args.seed,
                       args.command or [GDNFUZZ], args.busy)
        return

    stages: dict[str, float] = {}
    started = time.perf_counter()
    calls = record_sample(args.sample, args.seed)
    stages["sample"] = time.perf_counter() - started
    print(f"sample: {len(calls)} distinct split calls from {args.sample} scenarios x {len(PROFILES)} profiles "
          f"x {len(SAMPLE_POLICIES)} policies ({stages['sample']:.0f} s)", flush=True)

    started = time.perf_counter()
    every = generated.mutants()
    integers = generated.integer_sites(calls)
    typed = [m for m in every if m.site is None or m.site in integers]
    original = _answers(generated.installed_split(), calls)
    live = [m for m in typed if _answers(m.split, calls) != original]
    if args.limit:
        live = sorted(random.Random(args.mutant_seed).sample(live, min(args.limit, len(live))), key=lambda m: m.name)
    judged = {m.name for m in live}
    sample_equal = [m.name for m in typed if m.name not in judged] if not args.limit else []
    stages["triage"] = time.perf_counter() - started
    print(f"mutants: {len(every)} made, {len(every) - len(typed)} not on integers, {len(sample_equal)} equal on the "
          f"sample, {len(live)} to judge ({stages['triage']:.0f} s)", flush=True)

    started = time.perf_counter()
    grid_pool = ProcessPoolExecutor(args.jobs)
    checked = resumed_grid(args.resume, sample_equal)
    checked |= grid_checks([name for name in sample_equal if name not in checked], grid_pool)
    by_name = generated.by_name()
    live += sorted((by_name[n] for n, (same, _) in checked.items() if not same), key=lambda m: m.name)
    stages["grid (equal on the sample)"] = time.perf_counter() - started

    started = time.perf_counter()
    earlier = resumed(args.resume)
    records = [earlier[m.name] for m in live if m.name in earlier]
    todo = [m.name for m in live if m.name not in earlier]
    with ProcessPoolExecutor(args.jobs, initializer=_worker_init,
                             initargs=(args.generated, args.seed, args.named, args.first_kill)) as pool:
        lines = open(args.json + "l", "w") if args.json else None  # noqa: SIM115 - one record a line, as judged
        for record in records:
            if lines:
                lines.write(json.dumps(_plain(record), default=str) + "\n")
        for record in pool.map(judge_mutant, todo):
            records.append(record)
            if lines:
                lines.write(json.dumps(_plain(record), default=str) + "\n")
                lines.flush()
            print(f"  {record.name}: {record.status} ({len(record.corpus)} corpus, {len(record.generated)} "
                  f"generated, {record.seconds:.1f} s)", flush=True)
    records.sort(key=lambda r: r.name)
    stages["corpus + generated"] = time.perf_counter() - started

    started = time.perf_counter()
    unkilled = {r.name: r for r in records if r.status != "killed"}
    with grid_pool:
        unchecked = grid_checks([name for name, r in unkilled.items() if not r.grid], grid_pool)
    for name, (same, difference) in unchecked.items():
        record = unkilled[name]
        record.grid = difference
        record.status = "equivalent" if same else "alive"
    stages["grid (not killed)"] = time.perf_counter() - started

    started = time.perf_counter()
    _worker_init(args.generated, args.seed, args.named)  # this process's generated set, as each judge's
    differing = [r for r in records if r.status in SURVIVING]
    for r, reached in zip(differing, reaching([r.name for r in differing]).values(), strict=True):
        r.reached = reached
    stages["reach"] = time.perf_counter() - started

    started = time.perf_counter()
    alive = [r for r in records if r.status == "alive" and not r.fuzzed] if args.fuzz_time > 0 else []
    for r in alive:
        fuzz_mutant(r, args.fuzz_time, args.seed)
        print(f"  fuzz {r.name}: {r.status} {r.fuzz}", flush=True)
    for r in records:
        if r.status in SURVIVING and r.grid and r.fuzzed:
            r.status = "unflagged" if r.reached else "reach-gap"
    stages["fuzz"] = time.perf_counter() - started

    started = time.perf_counter()
    for r in records:
        if r.status == "unflagged":
            r.departures = [departure(r.name, label) for label in r.reached]
    stages["departures"] = time.perf_counter() - started

    shown = sum(1 for same, _ in checked.values() if same)
    print_report(records, stages, len(every), len(every) - len(typed), shown, len(alive))
    if args.json:
        Path(args.json).write_text(json.dumps({"stages": stages, "records": [_plain(r) for r in records],
                                               "grid_on_sample_equal": checked}, indent=1, default=str))
    if args.table:
        Path(args.table).write_text(table(records, stages, len(every), len(every) - len(typed), shown))
    if args.records:
        Path(args.records).write_text(records_text(records, checked))


def _plain(record: Record) -> dict[str, Any]:
    return vars(record) | {"corpus": [vars(k) for k in record.corpus], "generated": [vars(k) for k in record.generated]}


if __name__ == "__main__":
    main()
