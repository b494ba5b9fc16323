"""The ``gdnfuzz run`` process supervisor: harness workers, the reducer beside them, their output, restarts.

``atheris.Fuzz()`` never returns, so each worker is a harness subprocess; the supervisor passes the
run's settings (``fuzz.search.settings.RunSettings``) through the environment, reads the workers'
libFuzzer status lines and finding lines into a
:class:`~fuzz.search.libfuzzer.Progress`, shows one live status line, and restarts a worker that died
before the time was up (its last lines are kept in ``crashes/harness-crashes.log``, the input it died
on stored as a ``worker-crash`` finding).

Invariants:
- a worker that ends other than by libFuzzer's own end or the supervisor's stop has died, whatever its
  exit code (a split calling ``os._exit(0)`` exits 0): the input it was running (``fuzz.search.in_flight``)
  is stored as a finding and counted in the exit code, and the worker restarts if time is left;
- each worker's raw area is its own (``WorkerDirs``), also against another run on the same directories;
- fuzzing never waits for a finding: each worker stores its findings raw (``crashes/raw/worker-<i>/``)
  and the one reducer process (``fuzz.search.reducer``) minimizes each signature new to this run into
  ``crashes/<signature>/`` while the workers go on;
- ``--max-time`` holds within a few seconds: workers stop at the deadline (libFuzzer's
  ``-max_total_time``), the reducer stores its minimization in flight as it stands then, and anything
  it has not reached is stored as found before the supervisor returns;
- each signature's ``hits`` (new discoveries) and ``replays`` (committed corpus inputs run again) are
  the sums over the workers' raw bundles, synced into its bundle when the run ends.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO

from fuzz.errors import ExitCode, InputError
from fuzz.interpreter import python_command
from fuzz.report.finding_report import store_finding
from fuzz.sandbox.channel import describe_exit
from fuzz.search.artifacts import crash_finding, death
from fuzz.search.in_flight import died_on
from fuzz.search.libfuzzer import (
    DEFAULT_FLAGS,
    HARNESS_MODULE,
    SAVED_LINE,
    Progress,
    ended_normally,
    harness_command,
)
from fuzz.search.settings import RunSettings
from fuzz.search.warm import WarmWorker, fork_worker
from fuzz.store.atomic import sweep_leftovers
from fuzz.store.bundle import store_as_found, sync_counts

RUN_LIMITS = ("-timeout=900", "-rss_limit_mb=16384")  # gdnfuzz run's own
REDUCER_MODULE = "fuzz.search.reducer"
DRAIN_SECONDS = 8.0  # after the deadline: the reducer's in-flight store and the unreached jobs


def _pump(stream: IO[str], worker: int, progress: Progress, log: list[str]) -> None:
    for line in stream:
        progress.feed(worker, line.strip())
        log.append(line)
        del log[:-200]


def corpus_dirs(settings: RunSettings) -> list[str]:
    """The queue (where libFuzzer adds inputs) first, then the committed seeds and regressions."""
    settings.queue.mkdir(parents=True, exist_ok=True)
    return [str(settings.queue), *map(str, settings.committed)]


class Reducer:
    """The reducer process: one job per signature new to this run, its saved lines into ``progress``.

    It starts once a worker has run its first input (or a job is waiting), so its own vLLM import never
    competes with the workers' start-up for the CPU."""

    def __init__(self, settings: RunSettings, progress: Progress):
        self.settings, self.progress = settings, progress
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.sent: set[str] = set()

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None:
            self.proc = subprocess.Popen(python_command("-m", REDUCER_MODULE), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         env=self.settings.child_env(), cwd=os.getcwd())
            self.reader = threading.Thread(target=_pump, args=(self.proc.stdout, -1, self.progress, []), daemon=True)
            self.reader.start()
        return self.proc

    def submit_new(self) -> None:
        """Send every signature first found since the last call (its first raw bundle); start the process
        once fuzzing has begun."""
        jobs = [(sig, raw) for sig, raw in self.progress.first_raw_bundles() if sig not in self.sent]
        if not jobs and (self.proc is not None or self.progress.first_input is None):
            return
        proc = self._start()
        assert proc.stdin is not None
        for sig, raw in jobs:
            if proc.poll() is None:
                self.sent.add(sig)
                proc.stdin.write(f"{sig} {raw}\n")
                proc.stdin.flush()

    def finish(self, timeout: float) -> None:
        """No more jobs; wait up to ``timeout`` for the reducer to store what it has."""
        if self.proc is None:
            return
        assert self.proc.stdin is not None and self.reader is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)


def stop_at_deadline(procs: list[subprocess.Popen[str] | WarmWorker], grace: float = 3.0) -> None:
    """Ask each worker to stop (libFuzzer exits on SIGTERM after printing its stats), then kill it.

    libFuzzer's own ``-max_total_time`` starts counting only once vLLM is imported, so the supervisor
    holds the deadline itself."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    end = time.time() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(end - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def sync_signature_counts(crashes: Path, signatures: set[str]) -> None:
    """Each bundle's hits and replays: the sums over every worker's raw bundle of its signature."""
    for sig in signatures:
        if (crashes / sig / "verdict.json").exists():
            sync_counts(crashes / sig, sorted(p.parent for p in (crashes / "raw").glob(f"*/{sig}/verdict.json")))


class WorkerDirs:
    """The raw areas of this run's workers: ``raw/worker-<n>``, each claimed with an exclusive lock held
    until the run ends, so two runs on the same directories never share one (the second takes the next
    free numbers)."""

    def __init__(self, raw: Path):
        self.raw = raw
        self.held: dict[int, tuple[Path, int]] = {}  # worker -> (its directory, the lock's fd)

    def claim(self, worker: int) -> Path:
        if worker in self.held:
            return self.held[worker][0]
        taken = {d for d, _ in self.held.values()}
        for n in itertools.count(worker):
            path = self.raw / f"worker-{n}"
            if path in taken:
                continue
            path.mkdir(parents=True, exist_ok=True)
            fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.held[worker] = (path, fd)
            return path
        raise AssertionError("unreachable")

    def release(self) -> None:
        for _, fd in self.held.values():
            os.close(fd)
        self.held.clear()


def store_death(worker_dir: Path, returncode: int, log: list[str], settings: RunSettings,
                progress: Progress) -> str | None:
    """Store the input a dead worker was running as a finding (``fuzz.search.artifacts``: a ``hang`` when it
    ended itself on a run that ignored its deadline); its bundle line goes into ``progress``. None when it
    died between inputs."""
    data = died_on(worker_dir)
    if data is None:
        return None
    kind, ended = death(returncode)
    finding = crash_finding(kind, data, "".join(log[-40:]), settings.candidate, settings.reference,
                            ended=ended)
    bundle = store_finding(finding, settings.crashes, settings.regressions)
    progress.feed(-1, f"{SAVED_LINE} {finding.signature} {bundle}")
    return finding.signature


def run_workers(settings: RunSettings, progress: Progress, out: IO[str] = sys.stderr) -> ExitCode:
    deadline = time.time() + settings.max_time if settings.max_time else None
    settings = replace(settings, deadline=deadline)
    for root in (settings.crashes, settings.corpus):
        sweep_leftovers(root)  # what a killed earlier run left half-written
    dirs = corpus_dirs(settings)
    crashes = settings.crashes
    raw = crashes / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    worker_dirs = WorkerDirs(raw)
    procs: dict[int, tuple[subprocess.Popen[str] | WarmWorker, threading.Thread, list[str]]] = {}
    restarts = 0
    reducer = Reducer(settings, progress)

    def start(i: int) -> None:
        flags = [*DEFAULT_FLAGS, *RUN_LIMITS, f"-seed={settings.seed + i + 1000 * restarts}",
                 f"-artifact_prefix={raw}/"]
        if deadline:
            flags.append(f"-max_total_time={max(int(deadline - time.time()), 1)}")
        if settings.runs:
            flags.append(f"-runs={settings.runs}")
        args = [*flags, *settings.libfuzzer, *dirs]
        env = settings.for_worker(worker_dirs.claim(i)).child_env()
        proc = fork_worker([HARNESS_MODULE, *args], env, os.getcwd()) if settings.target == "split" else None
        if proc is None:  # no warm server (``gdnfuzz warm``), or it refused: a cold start
            proc = subprocess.Popen(harness_command(args), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    text=True, env=env, cwd=os.getcwd())
        log: list[str] = []
        thread = threading.Thread(target=_pump, args=(proc.stderr, i, progress, log), daemon=True)
        thread.start()
        procs[i] = (proc, thread, log)

    for i in range(settings.jobs):
        start(i)
    last_print = 0.0
    while procs:
        time.sleep(0.5)
        if deadline is not None and time.time() >= deadline or progress.unusable is not None:
            stop_at_deadline([proc for proc, _, _ in procs.values()])
        reducer.submit_new()
        for line in progress.take_announcements():
            print(line, file=out, flush=True)
        for i, (proc, thread, log) in list(procs.items()):
            if proc.poll() is None:
                continue
            thread.join(timeout=5)
            del procs[i]
            stopped = deadline is not None and time.time() >= deadline  # by stop_at_deadline, not a death
            if stopped or progress.unusable is not None or ended_normally(proc.returncode, log):
                continue
            progress.worker_crashes += 1
            how = describe_exit(proc.returncode)
            sig = store_death(worker_dirs.claim(i), proc.returncode, log, settings, progress)
            with open(crashes / "harness-crashes.log", "a") as f:
                f.write(f"--- worker {i} {how}" + (f" on the input stored as {sig}" if sig else "") + "\n"
                        + "".join(log[-40:]))
            if (deadline is None or time.time() < deadline - 5) and not settings.runs:
                restarts += 1
                print(f"gdnfuzz: worker {i} {how}; restarting", file=out)
                start(i)
            else:
                print("".join(log[-20:]), file=out)
        if time.time() - last_print >= 2 or not procs:
            print(progress.line(), file=out, flush=True)
            last_print = time.time()
    worker_dirs.release()
    reducer.submit_new()
    reducer.finish(DRAIN_SECONDS if deadline is not None else settings.minimize_seconds * (len(reducer.sent) + 1))
    for sig, raw_bundle in progress.first_raw_bundles():
        if not (crashes / sig / "verdict.json").exists():  # the reducer did not reach it in time
            stored = store_as_found(Path(raw_bundle), crashes, settings.regressions)
            progress.feed(-1, f"{SAVED_LINE} {sig} {stored}")
    for line in progress.take_announcements():
        print(line, file=out, flush=True)
    sync_signature_counts(crashes, progress.signatures())
    if progress.unusable is not None:
        raise InputError(progress.unusable)
    return progress.exit_code()
