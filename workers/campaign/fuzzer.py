"""The fuzzer actor: one atheris harness subprocess at a time, restarted until the deadline.

Invariants: no wait on another actor is unbounded; the harness never runs while its stores refuse writes
(the actor stops it, waits, clears cut-short queue files, and goes on)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from fuzz.model.deadline import STUCK_EXIT
from fuzz.search.in_flight import died_on
from fuzz.search.libfuzzer import (
    DEFAULT_FLAGS,
    FINDING_LINE,
    Progress,
    ended_normally,
    final_stats,
    harness_command,
    sum_profiles,
)
from fuzz.store.atomic import atomic_write
from fuzz.store.corpus_merge import remove_torn_inputs
from fuzz.store.writable import first_fault
from workers.campaign.config import CampaignConfig
from workers.campaign.crash_store import ARTIFACT_KINDS, crash_store_named, refusal

CALL_TIMEOUT = 30.0  # seconds a call to the crash store may take before it is tried again later
STORAGE_CHECK = 2.0  # seconds between checks that the stores take writes


def _die_with_parent() -> None:
    """preexec_fn: the harness gets SIGKILL when the actor's thread that started it dies (even by SIGKILL)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def harness_args(config: CampaignConfig, name: str, seed: int, deadline: float) -> list[str]:
    """libFuzzer flags and corpus dirs of fuzzer ``name``, its queue first; creates the queue and artifact dir."""
    dirs = [config.queue / name, config.queue, *config.read_only_dirs()]
    for d in written_dirs(config, name):
        d.mkdir(parents=True, exist_ok=True)
    return [*DEFAULT_FLAGS, f"-timeout={config.hang_timeout}", f"-rss_limit_mb={config.rss_limit_mb}",
            f"-seed={seed}", f"-max_total_time={max(int(deadline - time.time()), 1)}",
            f"-artifact_prefix={config.raw}/{name}-", *config.run.libfuzzer, *map(str, dirs)]


def written_dirs(config: CampaignConfig, name: str) -> list[Path]:
    """The directories fuzzer ``name``'s harness writes: its queue, its raw bundles, libFuzzer's artifacts."""
    return [config.queue / name, config.raw / name, config.raw]


def keep_died_on(raw: Path, name: str, code: int) -> Path | None:
    """The input fuzzer ``name``'s harness died on, kept in ``raw`` as a libFuzzer-style artifact; None when it
    died between inputs or libFuzzer already wrote that artifact."""
    data = died_on(raw / name)
    if data is None:
        return None
    digest = hashlib.sha1(data).hexdigest()
    if any(raw.glob(f"{name}-*-{digest}")):
        return None
    return atomic_write(raw / f"{name}-{'timeout' if code == STUCK_EXIT else 'crash'}-{digest}", data)


def start_harness(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(harness_command(args), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_die_with_parent)


class FuzzerActor:
    """One harness subprocess at a time. Invariant: every input that killed or hung it (also one left by an
    earlier incarnation) reaches the crash store before the restart; an unreported artifact stays and retries."""

    def __init__(self, name: str, seed: int, config: CampaignConfig, crash_store: str, deadline: float,
                 home: str | None = None):
        self.name, self.seed, self.config, self.deadline, self.home = name, seed, config, deadline, home
        self.store_name, self._store = crash_store, None
        self.progress = Progress()
        self.runs = 0
        self.pauses = 0  # runs stopped because a store refused writes (not counted as restarts)
        self.storage: tuple[str, int, str] | None = None  # why the stores refuse writes now: path, errno, strerror
        self.error: str | None = None
        self.final: dict[str, int] = {}  # libFuzzer's final stats of the last run that printed them
        self.proc: subprocess.Popen[str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name=f"{name}-supervisor", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch_storage, name=f"{name}-storage", daemon=True).start()

    def _supervise(self) -> None:
        try:
            self._supervise_runs()
        except Exception:  # shown by the driver (stats()["error"]); the actor stays up so the campaign can finish
            self.error = traceback.format_exc()
            raise

    def _supervise_runs(self) -> None:
        self._report_artifacts([])
        while not self._stop.is_set() and time.time() < self.deadline - 2:
            if not self._wait_for_storage():
                break
            code, log = self._run_once()
            paused = self.storage is not None
            if ended_normally(code, log) or self._stop.is_set():
                self._report_artifacts(log)
                break
            if not paused:
                self._keep_died_on(code)
            self._report_artifacts(log)
            if paused:
                self.pauses += 1
            else:
                self._log(f"--- {self.name} run {self.runs} exited {code}\n" + "".join(log[-40:]))
            self.runs += 1

    def _wait_for_storage(self) -> bool:
        """Until the stores take writes (True), or stopped / out of time (False); then clear cut-short queue files."""
        while not self._stop.is_set() and time.time() < self.deadline - 2:
            fault = self._fault()
            if fault is None:
                remove_torn_inputs(self.config.queue / self.name)
                return True
            self._stop.wait(STORAGE_CHECK)
        return False

    def _fault(self) -> OSError | None:
        """Why the stores refuse writes now (recorded in ``storage``), or None."""
        try:
            for d in written_dirs(self.config, self.name):
                d.mkdir(parents=True, exist_ok=True)
            fault = first_fault(written_dirs(self.config, self.name))
        except OSError as exc:
            fault = exc
        self.storage = None if fault is None else refusal(fault.filename or self.config.queue, fault)
        return fault

    def _watch_storage(self) -> None:
        """While a harness runs, stop it as soon as its stores refuse writes (the supervisor waits then)."""
        while not self._stop.wait(STORAGE_CHECK) and self._thread.is_alive():
            proc = self.proc
            if proc is not None and proc.poll() is None and self._fault() is not None:
                proc.terminate()

    def _log(self, text: str) -> None:
        try:
            with open(self.config.raw / f"{self.name}.log", "a") as f:
                f.write(text)
        except OSError as exc:
            self.storage = refusal(self.config.raw / f"{self.name}.log", exc)

    def _run_once(self) -> tuple[int, list[str]]:
        args = harness_args(self.config, self.name, self.seed + 1000 * self.runs, self.deadline)
        proc = self.proc = start_harness(args, self.config.harness_env(self.config.raw / self.name, self.home))
        log: list[str] = []
        assert proc.stderr is not None
        for line in proc.stderr:
            self.progress.feed(self.runs, line.strip())
            final_stats(line, self.final)
            if line.startswith(FINDING_LINE):
                _, sig, bundle = line.split(maxsplit=2)
                store = self._crash_store()
                if store is not None:  # not waited for: a crash store that misses it finds the raw bundle on disk
                    store.report_finding.remote(self.name, sig, bundle.strip())
            log.append(line)
            del log[:-200]
        return proc.wait(), log

    def _keep_died_on(self, code: int) -> None:
        try:
            keep_died_on(self.config.raw, self.name, code)
        except OSError as exc:
            self.storage = refusal(exc.filename or self.config.raw, exc)

    def _report_artifacts(self, log: list[str]) -> None:
        import ray

        store = self._crash_store()
        for prefix, kind in ARTIFACT_KINDS.items():
            for path in sorted(self.config.raw.glob(f"{self.name}-{prefix}-*")):
                if store is None:
                    return  # the artifact stays, reported on the next run
                ref = store.report_artifact.remote(self.name, str(path), kind, "".join(log[-40:]))
                try:
                    ray.get(ref, timeout=CALL_TIMEOUT)
                except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
                    return  # the crash store is restarting: the artifact stays, reported on the next run

    def _crash_store(self) -> Any:
        if self._store is None:
            self._store = crash_store_named(self.store_name)
        return self._store

    def stats(self) -> dict[str, Any]:
        with self.progress.lock:
            runs = dict(self.progress.workers)
            findings = len(self.progress.findings)
        current = runs.get(self.runs)
        running = self.proc is not None and self.proc.poll() is None
        return {"actor": self.name, "pid": os.getpid(), "execs": sum(w.execs for w in runs.values()),
                "exec_per_s": current.exec_per_s if current and running else 0,
                "coverage": max((w.cov for w in runs.values()), default=0),
                "corpus": current.corpus if current else 0, "findings": findings,
                "restarts": self.runs - self.pauses, "running": running, "done": not self._thread.is_alive(),
                "final": dict(self.final), "storage": self.storage, "error": self.error, "home": self.home,
                "profiles": sum_profiles([w.profiles for w in runs.values()],
                                         shares_of=[current.profiles] if current else [])}

    def stop(self, timeout: float = 5) -> None:
        """Stop the harness (SIGTERM: libFuzzer prints its final stats; SIGKILL after ``timeout``) and the threads."""
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._thread.join(timeout)
