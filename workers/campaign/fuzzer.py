"""The fuzzer actor: one atheris harness subprocess at a time, restarted until the deadline."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
import traceback
from typing import Any

from fuzz.search.libfuzzer import DEFAULT_FLAGS, FINDING_LINE, Progress, final_stats, harness_command
from workers.campaign.config import CampaignConfig
from workers.campaign.crash_store import ARTIFACT_KINDS


def _die_with_parent() -> None:
    """preexec_fn: the harness gets SIGKILL when the actor's thread that started it dies (even by SIGKILL)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def harness_args(config: CampaignConfig, name: str, seed: int, deadline: float) -> list[str]:
    """libFuzzer flags and corpus dirs of fuzzer ``name``: its working queue first, then the shared ones.

    Creates the working queue and the artifact directory (libFuzzer refuses a missing one).
    """
    dirs = [config.queue / name, config.queue, *config.read_only_dirs()]
    for d in (dirs[0], config.raw):
        d.mkdir(parents=True, exist_ok=True)
    return [*DEFAULT_FLAGS, f"-timeout={config.hang_timeout}", f"-rss_limit_mb={config.rss_limit_mb}",
            f"-seed={seed}", f"-max_total_time={max(int(deadline - time.time()), 1)}",
            f"-artifact_prefix={config.raw}/{name}-", *config.run.libfuzzer, *map(str, dirs)]



def start_harness(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(harness_command(args), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_die_with_parent)


class FuzzerActor:
    """One ``python -m fuzz.search.harness`` subprocess at a time, restarted until the deadline.

    Invariant: every input that killed or hung the harness (libFuzzer's
    artifact) is handed to the crash store before the harness is restarted,
    including those left by a previous incarnation of this actor.
    """

    def __init__(self, name: str, seed: int, config: CampaignConfig, crash_store: Any, deadline: float):
        self.name, self.seed, self.config, self.crash_store, self.deadline = name, seed, config, crash_store, deadline
        self.progress = Progress()
        self.runs = 0
        self.error: str | None = None
        self.final: dict[str, int] = {}  # libFuzzer's final stats of the last run that printed them
        self.proc: subprocess.Popen[str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name=f"{name}-supervisor", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        try:
            self._supervise_runs()
        except Exception:  # shown by the driver (stats()["error"]); the actor stays up so the campaign can finish
            self.error = traceback.format_exc()
            raise

    def _supervise_runs(self) -> None:
        self._report_artifacts([])
        while not self._stop.is_set() and time.time() < self.deadline - 2:
            code, log = self._run_once()
            self._report_artifacts(log)
            if code == 0 or self._stop.is_set():
                break
            with open(self.config.raw / f"{self.name}.log", "a") as f:
                f.write(f"--- {self.name} run {self.runs} exited {code}\n" + "".join(log[-40:]))
            self.runs += 1

    def _run_once(self) -> tuple[int, list[str]]:
        args = harness_args(self.config, self.name, self.seed + 1000 * self.runs, self.deadline)
        proc = self.proc = start_harness(args, self.config.harness_env(self.config.raw / self.name))
        log: list[str] = []
        assert proc.stderr is not None
        for line in proc.stderr:
            self.progress.feed(self.runs, line.strip())
            final_stats(line, self.final)
            if line.startswith(FINDING_LINE):
                _, sig, bundle = line.split(maxsplit=2)
                self.crash_store.report_finding.remote(self.name, sig, bundle.strip())
            log.append(line)
            del log[:-200]
        return proc.wait(), log

    def _report_artifacts(self, log: list[str]) -> None:
        import ray

        for prefix, kind in ARTIFACT_KINDS.items():
            for path in sorted(self.config.raw.glob(f"{self.name}-{prefix}-*")):
                ray.get(self.crash_store.report_artifact.remote(self.name, str(path), kind, "".join(log[-40:])))

    def stats(self) -> dict[str, Any]:
        with self.progress.lock:
            runs = dict(self.progress.workers)
            findings = len(self.progress.findings)
        current = runs.get(self.runs)
        running = self.proc is not None and self.proc.poll() is None
        return {"actor": self.name, "pid": os.getpid(), "execs": sum(w.execs for w in runs.values()),
                "exec_per_s": current.exec_per_s if current and running else 0,
                "coverage": max((w.cov for w in runs.values()), default=0),
                "corpus": current.corpus if current else 0, "findings": findings, "restarts": self.runs,
                "running": running, "done": not self._thread.is_alive(), "final": dict(self.final),
                "error": self.error}

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._thread.join(timeout)
