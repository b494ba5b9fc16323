"""The ``gdnfuzz run`` supervisor: harness worker subprocesses, the reducer beside them, their output, restarts.

Invariants: a worker that ends other than by libFuzzer's end or the supervisor's stop died: its in-flight input is
a stored, counted finding and it restarts if time is left (one lost with the warm server restarts cold, uncounted);
raw areas are per worker; fuzzing never waits for a finding; ``--max-time`` holds within seconds, what the reducer
did not reach stored as found."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO

from fuzz.errors import ExitCode, InputError
from fuzz.interpreter import python_command
from fuzz.plural import plural
from fuzz.report.finding_report import store_finding
from fuzz.sandbox.channel import describe_exit
from fuzz.search.artifacts import crash_finding, death
from fuzz.search.in_flight import died_on, forget_in_flight
from fuzz.search.libfuzzer import (
    DEFAULT_FLAGS,
    HARNESS_MODULE,
    SAVED_LINE,
    Progress,
    ended_normally,
    harness_command,
)
from fuzz.search.profiles import home_of
from fuzz.search.settings import RunSettings
from fuzz.search.warm import WarmWorker, fork_worker
from fuzz.store.atomic import sweep_leftovers
from fuzz.store.bundle import store_as_found, sync_counts

RUN_LIMITS = ("-timeout=900", "-rss_limit_mb=16384")  # gdnfuzz run's own
REDUCER_MODULE = "fuzz.search.reducer"
DRAIN_SECONDS = 8.0  # after the deadline: the reducer's in-flight store and the unreached jobs
STORE_SECONDS = 5.0  # a minimization in flight stops this long before the deadline, so that its store ends by it
STATUS_EVERY_S = 2.0  # the status line at most this often
HEARTBEAT_S = 10.0  # and at least this often, its figures unchanged


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
    """The reducer process, one job per new signature; it starts after a worker's first input, not during start-up."""

    def __init__(self, settings: RunSettings, progress: Progress):
        self.settings, self.progress = settings, progress
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.sent: set[str] = set()

    def _start(self, deadline: float | None) -> subprocess.Popen[str]:
        if self.proc is None:
            env = replace(self.settings, deadline=None if deadline is None else deadline - STORE_SECONDS).child_env()
            self.proc = subprocess.Popen(python_command("-m", REDUCER_MODULE), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         env=env, cwd=os.getcwd())
            self.reader = threading.Thread(target=_pump, args=(self.proc.stdout, -1, self.progress, []), daemon=True)
            self.reader.start()
        return self.proc

    def submit_new(self, deadline: float | None) -> None:
        """Send each signature first found since the last call; start the reducer under ``deadline`` - STORE_SECONDS."""
        jobs = [(sig, raw) for sig, raw in self.progress.first_raw_bundles() if sig not in self.sent]
        if not jobs and (self.proc is not None or self.progress.first_input is None):
            return
        proc = self._start(deadline)
        assert proc.stdin is not None
        for sig, raw in jobs:
            if proc.poll() is None:
                self.sent.add(sig)
                proc.stdin.write(f"{sig} {raw}\n")
                proc.stdin.flush()

    def finish(self, timeout: float) -> None:
        """No more jobs; wait up to ``timeout`` for the reducer to store what it has, then stop it."""
        if self.proc is None:
            return
        assert self.proc.stdin is not None and self.reader is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        self.kill()
        self.reader.join(timeout=5)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stop_at_deadline(procs: list[subprocess.Popen[str] | WarmWorker], grace: float = 3.0) -> None:
    """SIGTERM each worker (libFuzzer prints its stats), then kill it after ``grace``."""
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
    """Workers' raw areas ``raw/worker-<n>``, each locked until the run ends, so two runs never share one."""

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
    """Store a dead worker's in-flight input as a finding (``hang``: it ended itself); None: died between inputs."""
    data = died_on(worker_dir)
    if data is None:
        return None
    kind, ended = death(returncode)
    finding = crash_finding(kind, data, "".join(log[-40:]), settings.candidate, settings.reference,
                            ended=ended)
    bundle = store_finding(finding, settings.crashes, settings.regressions)
    progress.feed(-1, f"{SAVED_LINE} {finding.signature} {bundle}")
    return finding.signature


class RunClock:
    """When the run stops: ``max_time`` after its start (or after its first verdict: ``gdnfuzz ci``'s budget,
    which start-up does not spend), never after ``stop_by``, and at once on ^C."""

    def __init__(self, progress: Progress, max_time: float, from_first_verdict: bool, stop_by: float | None):
        self.progress = progress
        self.started = time.time() - (time.monotonic() - progress.started)  # the run's start, as the epoch counts
        self.max_time, self.from_first_verdict, self.stop_by = max_time, from_first_verdict, stop_by
        self.interrupted = False

    def deadline(self) -> float | None:
        """Seconds since the epoch at which the run stops (None: not known yet, or no limit)."""
        if self.interrupted:
            return 0.0
        first_verdict = self.progress.first_verdict
        budget: float | None = None
        if self.max_time and not self.from_first_verdict:
            budget = self.started + self.max_time
        elif self.max_time and first_verdict is not None:
            budget = self.started + first_verdict + self.max_time
        bounds = [b for b in (budget, self.stop_by) if b is not None]
        return min(bounds) if bounds else None

    def worker_limit(self) -> int | None:
        """A starting worker's ``-max_total_time``: the time left until :meth:`deadline`; None while unknown."""
        deadline = self.deadline()
        return None if deadline is None else max(int(deadline - time.time()), 1)


@contextlib.contextmanager
def interrupt_ends(clock: RunClock) -> Iterator[None]:
    """In the block, a first ^C ends the run as its deadline does and a second is KeyboardInterrupt; nothing
    changes outside the main thread or where SIGINT is ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def on_interrupt(signum: int, frame: object) -> None:
        clock.interrupted = True
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is on_interrupt:
            signal.signal(signal.SIGINT, previous)


def _drain(settings: RunSettings, reducer: Reducer, clock: RunClock, status: StatusLines) -> None:
    """Give the reducer the jobs left and time to store them: none after ^C or while it is still starting,
    :data:`DRAIN_SECONDS` after a deadline, else its minimization time per job."""
    deadline = clock.deadline()
    if not clock.interrupted:
        reducer.submit_new(deadline)
    if clock.interrupted or (deadline is not None and not reducer.progress.reducer_ready):
        wait = 0.0
    else:
        wait = DRAIN_SECONDS if deadline is not None else settings.minimize_seconds * (len(reducer.sent) + 1)
    unstored = [sig for sig, _ in reducer.progress.first_raw_bundles()
                if not (settings.crashes / sig / "verdict.json").exists()]
    if unstored and wait:
        status.say(f"storing {plural(len(unstored), 'finding')}: waiting {wait:.0f}s at most for the reducer")
    reducer.finish(wait)


class StatusLines:
    """The supervisor's output: the status line (at most every :data:`STATUS_EVERY_S`), new signatures, its actions."""

    def __init__(self, progress: Progress, out: IO[str]):
        self.progress, self.out = progress, out
        self.shown: str | None = None
        self.shown_at = -math.inf

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.progress.started:6.0f}s] {text}", file=self.out, flush=True)

    def announce(self) -> None:
        for line in self.progress.take_announcements():
            print(line, file=self.out, flush=True)

    def tick(self, final: bool = False) -> None:
        now, status = time.monotonic(), self.progress.status()
        every = STATUS_EVERY_S if status != self.shown else HEARTBEAT_S
        if now - self.shown_at >= every or (final and status != self.shown):
            self.say(status)
            self.shown, self.shown_at = status, now


def run_workers(settings: RunSettings, progress: Progress, out: IO[str] = sys.stderr, *,
                from_first_verdict: bool = False, stop_by: float | None = None) -> ExitCode:
    """Fuzz under ``settings`` until :class:`RunClock` stops the run, store what was found; the exit code."""
    clock = RunClock(progress, settings.max_time, from_first_verdict, stop_by)
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
    status = StatusLines(progress, out)

    def start(i: int, cold: bool = False) -> None:
        flags = [*DEFAULT_FLAGS, *RUN_LIMITS, f"-seed={settings.seed + i + 1000 * restarts}",
                 f"-artifact_prefix={raw}/"]
        limit = clock.worker_limit()
        if limit:
            flags.append(f"-max_total_time={limit}")
        if settings.runs:
            flags.append(f"-runs={settings.runs}")
        args = [*flags, *settings.libfuzzer, *dirs]
        env = replace(settings.for_worker(worker_dirs.claim(i)), home=home_of(i, settings.jobs)).child_env()
        proc = fork_worker([HARNESS_MODULE, *args], env, os.getcwd()) if settings.target == "split" and not cold \
            else None
        if proc is None:  # no warm server (``gdnfuzz warm``), or it refused: a cold start
            proc = subprocess.Popen(harness_command(args), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    text=True, env=env, cwd=os.getcwd())
        log: list[str] = []
        thread = threading.Thread(target=_pump, args=(proc.stderr, i, progress, log), daemon=True)
        thread.start()
        procs[i] = (proc, thread, log)

    with interrupt_ends(clock):
        try:
            for i in range(settings.jobs):
                start(i)
            stopping = False
            while procs:
                time.sleep(0.5)
                deadline = clock.deadline()
                unusable = progress.unusable is not None  # a worker cannot run the candidate: the run ends, exit 2
                if not stopping and (deadline is not None and time.time() >= deadline or unusable):
                    stopping = True
                    progress.stop(clock.interrupted)
                    why = "interrupted" if clock.interrupted else "the candidate cannot run here" if unusable \
                        else "time is up"
                    status.say(f"{why}: stopping "
                               f"{plural(len(procs), 'worker')}" + ("; ^C again to quit at once" if clock.interrupted
                                                                    else ""))
                    stop_at_deadline([proc for proc, _, _ in procs.values()])
                if not clock.interrupted:
                    reducer.submit_new(deadline)
                status.announce()
                for i, (proc, thread, log) in list(procs.items()):
                    if proc.poll() is None:
                        continue
                    thread.join(timeout=5)
                    del procs[i]
                    progress.retire(i)
                    if stopping or progress.unusable is not None or ended_normally(proc.returncode, log):
                        continue
                    if isinstance(proc, WarmWorker) and proc.lost:  # the server went, taking it along
                        forget_in_flight(worker_dirs.claim(i))
                        status.say(f"worker {i}: the warm server went away; restarting it cold")
                        start(i, cold=True)
                        continue
                    progress.worker_crashes += 1
                    how = describe_exit(proc.returncode)
                    sig = store_death(worker_dirs.claim(i), proc.returncode, log, settings, progress)
                    with open(crashes / "harness-crashes.log", "a") as f:
                        f.write(f"--- worker {i} {how}" + (f" on the input stored as {sig}" if sig else "") + "\n"
                                + "".join(log[-40:]))
                    if (deadline is None or time.time() < deadline - 5) and not settings.runs:
                        restarts += 1
                        status.say(f"worker {i} {how}; restarting")
                        start(i)
                    else:
                        print("".join(log[-20:]), file=out)
                status.tick(final=not procs)
            if not stopping:
                progress.stop(False)
            worker_dirs.release()
            _drain(settings, reducer, clock, status)
        finally:
            for proc, _, _ in procs.values():  # a second ^C: no worker outlives the run
                if proc.poll() is None:
                    proc.kill()
            reducer.kill()
    for sig, raw_bundle in progress.first_raw_bundles():
        if not (crashes / sig / "verdict.json").exists():  # the reducer did not reach it in time
            stored = store_as_found(Path(raw_bundle), crashes, settings.regressions)
            progress.feed(-1, f"{SAVED_LINE} {sig} {stored}")
    status.announce()
    sync_signature_counts(crashes, progress.signatures())
    if progress.unusable is not None:
        raise InputError(progress.unusable)
    return progress.exit_code()
