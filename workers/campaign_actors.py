"""The campaign's Ray actors and tasks: fuzzers, the crash store, verifiers, minimisation and merge.

On-disk layout (everything the campaign knows lives here, so a restarted actor
or a restarted campaign resumes from it; nothing is kept only in memory):

- ``corpus/queue/<actor>/``: the fuzzer's libFuzzer output corpus (its first
  corpus directory); ``corpus/queue/`` top level: the shared, merged corpus;
  ``corpus/seeds/`` and ``corpus/regressions/``: read-only inputs.
- ``crashes/raw/<actor>/<signature>/``: the bundle the fuzzer's harness saves
  for each divergence it meets (unminimised; its ``hits`` count that fuzzer's
  hits). One writer: that fuzzer's harness.
- ``crashes/raw/<actor>-crash-*`` / ``-timeout-*`` / ``-oom-*``: libFuzzer's
  artifact for an input that killed or hung the harness; moved to
  ``crashes/raw/reported/`` once the crash store has saved its finding.
- ``crashes/<signature>/``: the deduplicated, minimised bundle
  (:mod:`fuzz.crash_store`). One writer at a time: the crash store actor, or the
  verifier holding the signature's lease (``confirm_bundle`` writes
  ``confirmed`` into its verdict.json); the crash store never writes a leased
  bundle.

Actors are created with ``max_restarts=-1``: each starts its work thread in
``__init__``, so a restarted actor resumes by itself from the disk state.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.store import atomic_write

ARTIFACT_KINDS = {"crash": "worker-crash", "timeout": "hang", "oom": "worker-oom"}
UNVERIFIABLE = tuple(ARTIFACT_KINDS.values())  # findings the engine confirm does not apply to
MAX_VERIFY_ATTEMPTS = 2
FINAL_STAT = re.compile(r"stat::(\w+):\s+(\d+)")


@dataclass(frozen=True)
class CampaignConfig:
    """Everything an actor needs; absolute paths (on a cluster: the same shared mount on every node)."""

    corpus: Path
    crashes: Path
    candidate: str = "pre-51113"
    reference: str = "vllm"
    fuzzers: int = 2
    verifiers: int = 1
    gpus_per_verifier: float = 1.0
    max_time: float = 300.0
    seed: int = 1
    minimize_seconds: float = 60.0
    merge_every: float = 600.0
    hang_timeout: int = 60
    rss_limit_mb: int = 6144
    verify_tier: str = "engine"
    file_issues: str | None = None
    dry_run_issues: bool = False
    drain_time: float = 240.0
    cpu_share: float = 1.0  # Ray CPUs each fuzzer, verifier and task asks for (below 1 on an oversubscribed machine)
    libfuzzer: tuple[str, ...] = ()

    @property
    def queue(self) -> Path:
        return self.corpus / "queue"

    @property
    def regressions(self) -> Path:
        return self.corpus / "regressions"

    @property
    def raw(self) -> Path:
        return self.crashes / "raw"

    def read_only_dirs(self) -> list[Path]:
        return [d for d in (self.corpus / "seeds", self.regressions) if d.is_dir()]

    def harness_env(self, crashes: Path) -> dict[str, str]:
        """The harness settings (``fuzz.harness``'s environment) for campaign mode: bundles go to ``crashes``,
        no minimisation and no regressions (the crash store does both)."""
        return {**os.environ, "GDNFUZZ_CANDIDATE": self.candidate, "GDNFUZZ_REFERENCE": self.reference,
                "GDNFUZZ_CRASHES": str(crashes), "GDNFUZZ_REGRESSIONS": "", "GDNFUZZ_MINIMIZE_SECONDS": "0",
                "VLLM_LOGGING_LEVEL": "ERROR"}


def _die_with_parent() -> None:
    """preexec_fn: the harness gets SIGKILL when the actor's thread that started it dies (even by SIGKILL)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def harness_args(config: CampaignConfig, name: str, seed: int, deadline: float) -> list[str]:
    """libFuzzer flags and corpus dirs of fuzzer ``name``: its working queue first, then the shared ones.

    Creates the working queue and the artifact directory (libFuzzer refuses a missing one).
    """
    from fuzz.run_cli import DEFAULT_FLAGS

    dirs = [config.queue / name, config.queue, *config.read_only_dirs()]
    for d in (dirs[0], config.raw):
        d.mkdir(parents=True, exist_ok=True)
    return [*DEFAULT_FLAGS, f"-timeout={config.hang_timeout}", f"-rss_limit_mb={config.rss_limit_mb}",
            f"-seed={seed}", f"-max_total_time={max(int(deadline - time.time()), 1)}",
            f"-artifact_prefix={config.raw}/{name}-", *config.libfuzzer, *map(str, dirs)]


def final_stats(line: str, into: dict[str, int]) -> None:
    """libFuzzer's ``-print_final_stats`` lines (``stat::number_of_executed_units: N``) into ``into``."""
    m = FINAL_STAT.match(line)
    if m:
        into[m.group(1)] = int(m.group(2))


def start_harness(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "fuzz.harness", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_die_with_parent)


# ---------------------------------------------------------------- fuzzer


class FuzzerActor:
    """One ``python -m fuzz.harness`` subprocess at a time, restarted until the deadline.

    Invariant: every input that killed or hung the harness (libFuzzer's
    artifact) is handed to the crash store before the harness is restarted,
    including those left by a previous incarnation of this actor.
    """

    def __init__(self, name: str, seed: int, config: CampaignConfig, crash_store: Any, deadline: float):
        from fuzz.run_cli import Progress

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
        from fuzz.harness import FINDING_LINE

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


# ---------------------------------------------------------------- tasks


def minimise_finding(raw_bundle: str, sig: str, candidate: str, reference: str, seconds: float) -> Any:
    """Minimise the raw bundle's input while ``sig`` reproduces; the Finding to store, or None if it did not."""
    from fuzz.crash_store import Finding, stage_dicts
    from fuzz.minimize import minimize, same_signature
    from fuzz.policies import resolve_policy
    from fuzz.replay import replay
    from fuzz.scenario import load_scenario

    original, _ = load_scenario(Path(raw_bundle) / "original.json")
    cand, ref = resolve_policy(candidate), resolve_policy(reference)
    report = minimize(original, same_signature(sig, cand, ref), max_seconds=seconds)
    final = replay(report.minimized, cand, ref, "sim")
    if final.verdict.first is None:
        return None
    return Finding(sig, original, report.minimized, final.verdict, cand.spec, ref.spec, final.candidate,
                   stages=stage_dicts(report.stages))


def merge_shared_corpus(config: CampaignConfig) -> Any:
    """One set-cover merge of the campaign's queue (fuzz.corpus_merge); returns its MergeReport."""
    from fuzz.corpus_merge import merge_corpus

    env = config.harness_env(config.raw / "merge")
    return merge_corpus(config.queue, config.read_only_dirs(), env, flags=(f"-rss_limit_mb={config.rss_limit_mb}",))


def crash_finding(sig_kind: str, artifact: Path, log_tail: str, candidate: str, reference: str) -> Any:
    """A Finding for an input that killed or hung the harness; its signature names the exception type."""
    from fuzz.crash_store import Finding
    from fuzz.mutate import decode
    from fuzz.oracle import Finding as Divergence
    from fuzz.oracle import Verdict
    from fuzz.result import RunResult
    from fuzz.signature import SAFE, conditions

    scenario = decode(artifact.read_bytes())
    error = next((ln.split(":", 1)[0] for ln in reversed(log_tail.splitlines())
                  if ln[:1].isalpha() and ":" in ln and ln.split(":", 1)[0].isidentifier()), "signal")
    sig = SAFE.sub("-", "-".join([sig_kind, error, *conditions(scenario)])).strip("-").lower()[:128]
    summary = f"the harness {'hung on' if sig_kind == 'hang' else 'died on'} this input ({error})"
    details = {"artifact": artifact.name, "log": log_tail[-4000:]}
    verdict = Verdict("diverged", [Divergence(sig_kind, "candidate", summary, details=details)])
    return Finding(sig, scenario, scenario, verdict, candidate, reference, RunResult("sim", candidate, sig))


# ---------------------------------------------------------------- crash store


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _update_verdict(bundle: Path, **changes: Any) -> None:
    data = _read_json(bundle / "verdict.json")
    data.update(changes)
    atomic_write(bundle / "verdict.json", json.dumps(data, indent=1, sort_keys=True) + "\n")


@dataclass
class _Event:
    seconds: float
    signature: str
    what: str


@dataclass
class CrashStoreState:
    """What the crash store is doing now; rebuilt from disk by :meth:`CrashStoreActor.resume`."""

    known: set[str] = field(default_factory=set)  # signatures with a bundle in crashes/
    minimising: dict[str, Any] = field(default_factory=dict)  # signature -> ObjectRef of its task
    given_up: set[str] = field(default_factory=set)  # did not reproduce when minimised
    queue: deque[str] = field(default_factory=deque)  # waiting for a verifier
    leases: dict[str, str] = field(default_factory=dict)  # verifier -> signature it is confirming
    attempts: Counter[str] = field(default_factory=Counter)
    dirty: set[str] = field(default_factory=set)  # hits to sync into crashes/<sig>/verdict.json
    states: dict[str, str | None] = field(default_factory=dict)  # signature -> confirmed state
    events: list[_Event] = field(default_factory=list)


class CrashStoreActor:
    """Dedups findings by signature, minimises each new one, queues it for a verifier, files confirmed ones."""

    def __init__(self, config: CampaignConfig, started: float):
        self.config, self.started = config, started
        self.s = CrashStoreState()
        config.raw.mkdir(parents=True, exist_ok=True)
        (config.raw / "reported").mkdir(exist_ok=True)
        self.resume()

    # -- resume from disk

    def resume(self) -> None:
        for verdict_file in sorted(self.config.crashes.glob("*/verdict.json")):
            data = _read_json(verdict_file)
            sig = verdict_file.parent.name
            self.s.known.add(sig)
            self.s.states[sig] = data.get("confirmed")
            self.s.dirty.add(sig)
            if data.get("confirmed") is None and data.get("kind") not in UNVERIFIABLE:
                self._enqueue(sig)
            elif data.get("confirmed") == "confirmed":
                self._file(sig)
        for raw in sorted(self.config.raw.glob("*/*/verdict.json")):
            self.report_finding(raw.parent.parent.name, raw.parent.name, str(raw.parent))

    # -- findings

    def report_finding(self, actor: str, sig: str, raw_bundle: str) -> None:
        """A fuzzer met ``sig`` (its harness already saved or bumped the raw bundle)."""
        self.s.dirty.add(sig)
        if sig in self.s.known or sig in self.s.minimising or sig in self.s.given_up:
            return
        import ray

        self._event(sig, f"found by {actor}")
        task = ray.remote(minimise_finding).options(num_cpus=self.config.cpu_share, max_retries=2)
        self.s.minimising[sig] = task.remote(raw_bundle, sig, self.config.candidate, self.config.reference,
                                             self.config.minimize_seconds)

    def report_artifact(self, actor: str, artifact: str, kind: str, log_tail: str) -> str:
        """Save (or count) the finding for a libFuzzer artifact, then move the artifact to raw/reported/."""
        from fuzz.crash_store import save_finding

        path = Path(artifact)
        finding = crash_finding(kind, path, log_tail, self.config.candidate, self.config.reference)
        if finding.signature in self.s.known:
            bundle = self.config.crashes / finding.signature
            _update_verdict(bundle, hits=int(_read_json(bundle / "verdict.json").get("hits", 1)) + 1)
        else:
            save_finding(finding, self.config.crashes, None)
            self.s.known.add(finding.signature)
            self.s.states[finding.signature] = None
            self._event(finding.signature, f"{kind} of {actor}")
        shutil.move(str(path), self.config.raw / "reported" / path.name)
        return finding.signature

    def tick(self) -> dict[str, Any]:
        """Collect finished minimisations, sync hit counts; returns the stats (called by the driver)."""
        import ray

        from fuzz.crash_store import save_finding

        for sig, ref in list(self.s.minimising.items()):
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.s.minimising[sig]
            try:
                finding = ray.get(ref)
            except Exception as exc:  # the task's own error, after Ray's retries for a dead worker
                print(f"gdnfuzz campaign: minimising {sig} failed: {exc}", file=sys.stderr)
                finding = None
            if finding is None:
                self.s.given_up.add(sig)
                self._event(sig, "did not reproduce")
                continue
            save_finding(finding, self.config.crashes, self.config.regressions)
            self.s.known.add(sig)
            self.s.states[sig] = None
            self._event(sig, "minimised")
            self._enqueue(sig)
        leased = set(self.s.leases.values())
        for sig in list(self.s.dirty):
            if sig in self.s.known and sig not in leased:
                self._sync_hits(sig)
                self.s.dirty.discard(sig)
        return self.stats()

    def _sync_hits(self, sig: str) -> None:
        raw = [_read_json(p).get("hits", 1) for p in self.config.raw.glob(f"*/{sig}/verdict.json")]
        bundle = self.config.crashes / sig
        if raw and _read_json(bundle / "verdict.json").get("hits") != sum(raw):
            _update_verdict(bundle, hits=sum(raw))

    # -- verification

    def _enqueue(self, sig: str) -> None:
        if self.config.verifiers > 0 and sig not in self.s.queue:
            self.s.queue.append(sig)

    def next_verification(self, verifier: str) -> str | None:
        """The next bundle for ``verifier`` (leased to it); a verifier asking again while holding a lease died."""
        held = self.s.leases.pop(verifier, None)
        if held is not None:
            self.s.attempts[held] += 1
            if self.s.attempts[held] >= MAX_VERIFY_ATTEMPTS:
                self.verified(verifier, held, "inconclusive", f"the verifier died {self.s.attempts[held]} times on it")
            else:
                self.s.queue.appendleft(held)
        if not self.s.queue:
            return None
        sig = self.s.queue.popleft()
        self.s.leases[verifier] = sig
        return str(self.config.crashes / sig)

    def verified(self, verifier: str, sig: str, state: str, error: str | None = None) -> None:
        """The verifier is done with ``sig``; ``error`` set means confirm_bundle wrote nothing."""
        if self.s.leases.get(verifier) == sig:
            del self.s.leases[verifier]
        if error is not None:
            _update_verdict(self.config.crashes / sig, confirmed=state, confirmation={"error": error})
        self.s.states[sig] = state
        self._event(sig, f"verified: {state}")
        if state == "confirmed":
            self._file(sig)

    def _file(self, sig: str) -> None:
        from fuzz.issue_filing import file_issue

        repo, bundle = self.config.file_issues, self.config.crashes / sig
        if repo is None or (bundle / "issue.json").exists() or (self.config.dry_run_issues and
                                                                (bundle / "issue.md").exists()):
            return
        try:
            result = file_issue(bundle, repo, self.config.dry_run_issues)
        except Exception as exc:  # FilingError, BundleError: reported, retried on the next campaign
            print(f"gdnfuzz campaign: filing {sig}: {exc}", file=sys.stderr)
            return
        self._event(sig, f"issue {result.action}" + (f" {result.url}" if result.url else ""))

    # -- reporting

    def _event(self, sig: str, what: str) -> None:
        self.s.events.append(_Event(round(time.time() - self.started, 1), sig, what))

    def idle(self) -> bool:
        return not self.s.minimising and not self.s.leases and (self.config.verifiers == 0 or not self.s.queue)

    def stats(self) -> dict[str, Any]:
        return {"signatures": len(self.s.known), "minimising": len(self.s.minimising), "queue": len(self.s.queue),
                "verifying": len(self.s.leases), "states": dict(self.s.states), "idle": self.idle(),
                "events": [(e.seconds, e.signature, e.what) for e in self.s.events]}


# ---------------------------------------------------------------- verifier


class VerifierActor:
    """Pulls bundles from the crash store and confirms each on the engine tier (``fuzz.confirm``)."""

    def __init__(self, name: str, config: CampaignConfig, crash_store: Any):
        self.name, self.config, self.crash_store = name, config, crash_store
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"{name}-loop", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import ray

        from fuzz.confirm import confirm_bundle

        while not self._stop.is_set():
            bundle = ray.get(self.crash_store.next_verification.remote(self.name))
            if bundle is None:
                self._stop.wait(1.0)
                continue
            error = None
            try:
                state = confirm_bundle(Path(bundle), self.config.verify_tier)
            except Exception as exc:  # a bad bundle or an engine error: recorded, never a silent pass
                state, error = "inconclusive", f"{type(exc).__name__}: {exc}"
            ray.get(self.crash_store.verified.remote(self.name, Path(bundle).name, state, error))
            self.done += 1

    def stats(self) -> dict[str, Any]:
        return {"actor": self.name, "pid": os.getpid(), "done": self.done}

    def stop(self, timeout: float = 5) -> None:
        self._stop.set()
        self._thread.join(timeout)
