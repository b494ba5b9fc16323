"""``gdnfuzz ci``'s pipeline (ClusterFuzzLite's code-change mode): replay the corpus, fuzz, fail only on new signatures.

Invariants: everything is written under ``--out`` (:class:`CiPaths`), the committed corpus is only read; a signature
fails only if outside the baseline with the reference right; fuzzing time counts from the first verdict; nothing
runs past the overall time bound (:func:`time_bound`), and whatever it cut is reported as not judged."""

from __future__ import annotations

import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import ConfigRejected, InputError
from fuzz.model.json_input import json_files
from fuzz.model.policies import Policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import replay_argv
from fuzz.oracle.verdict import FailOn, finding_signature
from fuzz.plural import plural
from fuzz.report.ci_report import Case
from fuzz.search.libfuzzer import Progress
from fuzz.search.settings import COMMITTED_DIRS, RunSettings
from fuzz.search.supervisor import run_workers


@dataclass(frozen=True)
class CiPaths:
    """The layout of ``--out``, which is all a check writes: the fuzzing corpus (``corpus/queue`` is what CI caches
    between runs), the crash store, and the reports (``junit.xml``, ``gdnfuzz.sarif``, ``summary.md``)."""

    out: Path
    corpus: Path
    crashes: Path

    @classmethod
    def under(cls, out: Path) -> CiPaths:
        return cls(out, out / "corpus", out / "crashes")


def corpus_files(corpus: Path, skipped: Callable[[Path, str], None]) -> list[Path]:
    """``corpus``'s seeds and regressions in a stable order: regular files only, any other ``*.json`` to ``skipped``."""
    if not corpus.is_dir():
        raise InputError(f"{corpus}: no such corpus directory")
    return sorted(p for d in COMMITTED_DIRS if (corpus / d).is_dir() for p in json_files(corpus / d, skipped))


class TimeBoundReached(BaseException):
    """The overall time bound passed (raised in the main thread by :func:`time_bound`, wherever it was)."""


@contextmanager
def time_bound(until: float) -> Iterator[None]:
    """Raise :class:`TimeBoundReached` in the main thread at ``until`` (epoch seconds) if the block still runs, by
    ``SIGALRM`` (libFuzzer, which owns it, runs in the workers); off the main thread it bounds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise TimeBoundReached

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(until - time.time(), 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def case_name(path: Path, corpus: Path) -> str:
    """A corpus file's name in the reports: its path from the corpus root's own name (``corpus/regressions/x.json``)."""
    return (Path(corpus.resolve().name) / path.relative_to(corpus)).as_posix()


def replay_corpus(files: list[Path], corpus: Path, candidate: Policy, reference: Policy, fail_on: FailOn,
                  until: float, said: Callable[[str], None]) -> list[Case]:
    """A case per corpus file, run on sim under both policies and ``said``; at ``until`` the rest get a ``problem``."""
    cases: list[Case] = []
    try:
        with time_bound(until):
            for path in files:
                cases.append(_replay_one(path, corpus, candidate, reference, fail_on))
                if time.time() >= until:  # a bound that landed in a policy call was taken for its fault
                    cases.pop()
                    break
                said(f"replayed {len(cases)}/{len(files)} {cases[-1].name}: {cases[-1].signature} "
                     f"({cases[-1].seconds:.1f}s)")
    except TimeBoundReached:
        pass
    left = files[len(cases):]
    if left:
        said(f"the time bound was reached: {plural(len(left), 'corpus file')} not judged")
    return cases + [Case(case_name(p, corpus), "replay", "clean", "not judged", "", 0.0,
                         problem="not judged: the overall time bound (--max-time) was reached first") for p in left]


def _replay_one(path: Path, corpus: Path, candidate: Policy, reference: Policy, fail_on: FailOn) -> Case:
    scenario, _ = load_scenario(path)  # a malformed file is an input error naming it
    start = time.monotonic()
    try:
        replayed = replay(scenario, candidate, reference, "sim")
    except ConfigRejected as exc:
        raise ConfigRejected(f"{path}: {exc}") from None
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
    return Case(case_name(path, corpus), "replay", sig, str(replayed.verdict.status), replayed.verdict.summary,
                time.monotonic() - start, replay_argv(str(path), candidate.spec, reference.spec, "sim", fail_on))


def prepare_fuzz_corpus(committed: Path, paths: CiPaths) -> None:
    """The fuzzing corpus under ``--out``: the cached queue, fresh copies of the committed regular files."""
    for name in COMMITTED_DIRS:
        target = paths.corpus / name
        shutil.rmtree(target, ignore_errors=True)
        if (committed / name).is_dir():
            shutil.copytree(committed / name, target, ignore=_not_regular)
    (paths.corpus / "queue").mkdir(parents=True, exist_ok=True)


def _not_regular(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if not (Path(directory) / n).is_file() and not (Path(directory) / n).is_dir()]


def fuzz(committed: Path, paths: CiPaths, candidate: Policy, reference: Policy, seconds: int, jobs: int, seed: int,
         fail_on: FailOn, minimize_seconds: float, until: float) -> tuple[list[Case], Progress]:
    """Coverage-guided fuzzing for ``seconds`` from the first verdict, stopped at ``until``; a case per signature."""
    prepare_fuzz_corpus(committed, paths)
    settings = RunSettings(candidate=candidate.spec, reference=reference.spec, fail_on=fail_on, max_time=seconds,
                           seed=seed, jobs=jobs, minimize_seconds=minimize_seconds, corpus=paths.corpus,
                           crashes=paths.crashes, write_regressions=False)
    progress = Progress()
    run_workers(settings, progress, from_first_verdict=True, stop_by=until)
    cases: dict[str, Case] = {}
    for at, sig, bundle in sorted(progress.findings):
        scenario = str(Path(bundle) / "scenario.json")
        cases.setdefault(sig, Case(sig, "fuzz", sig, "diverged", f"found after {at:.0f}s of fuzzing; bundle {bundle}",
                                   at, replay_argv(scenario, candidate.spec, reference.spec, "sim", fail_on)))
    return list(cases.values()), progress
