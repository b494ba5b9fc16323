"""The crash store actor, sole writer of ``crashes/<signature>/``: dedups, minimizes, queues for verifiers, files.

Invariants: a new incarnation rebuilds all state from disk (:meth:`CrashStoreActor.resume`); minimisations ask
for no CPU, at most ``config.minimizers`` at once, and one unfinished by the drain is stored as found; every
signature seen is stored, minimized or as found; a refused write (:class:`~fuzz.errors.StorageError`) is kept in
``unsaved`` until the store takes writes or :meth:`CrashStoreActor.finish` writes the fallback; never partial."""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.errors import InputError
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import class_of_signature
from fuzz.reduce.minimize import minimize_raw_bundle
from fuzz.report.finding_report import store_finding
from fuzz.report.github import file_issue
from fuzz.sandbox.scope import ambient
from fuzz.search.artifacts import crash_finding
from fuzz.store.atomic import sweep_leftovers
from fuzz.store.bundle import count_occurrence, load_verdict, store_as_found, sync_counts, update_verdict
from fuzz.store.writable import store_fault
from workers.campaign.config import CampaignConfig

ARTIFACT_KINDS = {"crash": "worker-crash", "timeout": "hang", "oom": "worker-oom"}
UNVERIFIABLE = tuple(ARTIFACT_KINDS.values())  # findings the engine confirm does not apply to
MAX_VERIFY_ATTEMPTS = 2
MIN_MINIMIZE_SECONDS = 2.0  # with less left before the end of the drain, a finding is stored as found
MINIMIZE_RETRIES = 2  # Ray re-runs a minimisation whose worker or node died this often


@dataclass
class _Event:
    seconds: float
    signature: str
    what: str


@dataclass
class CrashStoreState:
    """What the crash store is doing now; rebuilt from disk by :meth:`CrashStoreActor.resume`."""

    known: set[str] = field(default_factory=set)  # signatures with a bundle in crashes/
    seen: dict[str, str] = field(default_factory=dict)  # every signature a fuzzer saved raw -> its first raw bundle
    pending: deque[str] = field(default_factory=deque)  # the minimisation queue
    minimizing: dict[str, Any] = field(default_factory=dict)  # signature -> ObjectRef of its task
    unsaved: dict[str, Finding | Path] = field(default_factory=dict)  # the store refused it: a finding, or a raw bundle
    artifacts: dict[str, Path] = field(default_factory=dict)  # signature -> artifact to move once it is stored
    storage: tuple[str, int, str] | None = None  # why the store refuses writes now: path, errno, strerror
    queue: deque[str] = field(default_factory=deque)  # waiting for a verifier
    leases: dict[str, str] = field(default_factory=dict)  # verifier -> signature it is confirming
    attempts: Counter[str] = field(default_factory=Counter)
    dirty: set[str] = field(default_factory=set)  # hits to sync into crashes/<sig>/verdict.json
    states: dict[str, str | None] = field(default_factory=dict)  # signature -> confirmed state
    events: list[_Event] = field(default_factory=list)


def refusal(path: str | Path, exc: OSError) -> tuple[str, int, str]:
    """A refused write as actors report it (path, errno, strerror); the driver makes it a StorageError again."""
    return str(path), exc.errno or 0, exc.strerror or str(exc)


def crash_store_named(name: str) -> Any:
    """The crash store's handle by name (one that survives its restarts); None while unresolved (caller retries)."""
    import ray

    try:
        return ray.get_actor(name)
    except ValueError:
        return None


def raw_signatures(config: CampaignConfig) -> dict[str, Path]:
    """Every signature with a raw bundle on the shared store -> its first raw bundle (by path)."""
    found: dict[str, Path] = {}
    for verdict in sorted(config.raw.glob("*/*/verdict.json")):
        found.setdefault(verdict.parent.name, verdict.parent)
    return found


def minimize_sandboxed(*args: Any) -> Any:
    """``minimize_raw_bundle`` as a Ray task: in its worker, a user's candidate loads and answers in a sandbox
    child (``fuzz.sandbox.scope.ambient``), never beside the minimizer's judge."""
    ambient()
    return minimize_raw_bundle(*args)


def store_unminimized(config: CampaignConfig) -> list[str]:
    """Store every raw signature without a bundle as found; returns them. Only once the crash store is gone."""
    stored = []
    for sig, raw in raw_signatures(config).items():
        if not (config.crashes / sig / "verdict.json").exists():
            store_as_found(raw, config.crashes, config.regressions)
            stored.append(sig)
    return stored


class CrashStoreActor:
    def __init__(self, config: CampaignConfig, started: float, deadline: float):
        self.config, self.started, self.deadline = config, started, deadline
        self.s = CrashStoreState()
        try:
            (config.raw / "reported").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._refused(config.raw, exc)
        self.resume()

    # -- resume from disk

    def resume(self) -> None:
        for root in (self.config.crashes, self.config.run.corpus):
            sweep_leftovers(root)  # what a writer killed with its node left half-written
        for verdict_file in sorted(self.config.crashes.glob("*/verdict.json")):
            sig = verdict_file.parent.name
            try:
                data = load_verdict(verdict_file)
            except InputError as exc:  # a bundle this store cannot read is shown, never a campaign that cannot start
                self._event(sig, f"unreadable bundle: {exc}")
                continue
            self.s.known.add(sig)
            self.s.states[sig] = data.get("confirmed")
            self.s.dirty.add(sig)
            if data.get("confirmed") is None and data.get("kind") not in UNVERIFIABLE:
                self._enqueue(sig)
            elif data.get("confirmed") == "confirmed":
                self._file(sig)
        for sig, raw in raw_signatures(self.config).items():
            self.report_finding(raw.parent.name, sig, str(raw))

    # -- findings

    def report_finding(self, actor: str, sig: str, raw_bundle: str) -> None:
        """A fuzzer met ``sig`` (its harness already saved or bumped the raw bundle): queue it for minimisation."""
        self.s.seen.setdefault(sig, raw_bundle)
        self.s.dirty.add(sig)
        if sig in self.s.known or sig in self.s.minimizing or sig in self.s.pending or sig in self.s.unsaved:
            return
        self._event(sig, f"found by {actor}")
        self.s.pending.append(sig)

    def report_artifact(self, actor: str, artifact: str, kind: str, log_tail: str) -> str:
        """Save (or count) the finding for a libFuzzer artifact, then move the artifact to raw/reported/."""
        path = Path(artifact)
        finding = crash_finding(kind, path.read_bytes(), log_tail, self.config.run.candidate, self.config.run.reference,
                                artifact=path.name)
        sig = finding.signature
        self.s.seen.setdefault(sig, str(path))
        if sig in self.s.unsaved:
            return sig  # reported again by a restarted fuzzer while the store refuses writes
        if sig in self.s.known:
            try:
                count_occurrence(self.config.crashes / sig)
                self._move_to_reported(path)
            except OSError as exc:
                self._refused(self.config.crashes / sig, exc)
            return sig
        self.s.artifacts[sig] = path
        self._store(sig, finding, f"{kind} of {actor}")
        return sig

    def _move_to_reported(self, artifact: Path) -> None:
        shutil.move(str(artifact), self.config.raw / "reported" / artifact.name)

    def _store(self, sig: str, finding: Finding | Path, what: str) -> bool:
        """Store a finding (minimized) or a raw bundle (as found); kept in ``unsaved`` if the store refuses it."""
        try:
            if isinstance(finding, Path):
                store_as_found(finding, self.config.crashes, self.config.regressions)
            else:
                regressions = None if sig in self.s.artifacts else self.config.regressions
                store_finding(finding, self.config.crashes, regressions)
        except OSError as exc:
            if sig not in self.s.unsaved:
                self._event(sig, f"{what}: kept in memory, the store refused it ({exc.strerror or exc})")
            self.s.unsaved[sig] = finding
            self._refused(self.config.crashes / sig, exc)
            return False
        self.s.unsaved.pop(sig, None)
        self.s.known.add(sig)
        self.s.states[sig] = None
        self._event(sig, what)
        artifact = self.s.artifacts.pop(sig, None)
        if artifact is None:
            self._enqueue(sig)  # an input that killed or hung the harness is not confirmed on the engine
        elif artifact.exists():
            try:
                self._move_to_reported(artifact)
            except OSError as exc:  # it stays, and is counted once more when reported again
                self._refused(artifact, exc)
        return True

    def _refused(self, path: Path, exc: OSError) -> None:
        self.s.storage = refusal(path, exc)

    def tick(self) -> dict[str, Any]:
        """Collect finished minimisations, start queued ones, retry refused writes, sync hits; returns the stats."""
        import ray

        for sig, ref in list(self.s.minimizing.items()):
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.s.minimizing[sig]
            try:
                finding = ray.get(ref)
            except Exception as exc:  # the task's own error, after Ray's retries for a dead worker or node
                self._store(sig, Path(self.s.seen[sig]), f"minimizing failed ({type(exc).__name__}): stored as found")
                continue
            if finding is None:
                self._store(sig, Path(self.s.seen[sig]), "did not reproduce when minimized: stored as found")
            else:
                self._store(sig, finding, "minimized")
        for sig, raw in raw_signatures(self.config).items():  # a report lost while this actor restarted
            if sig not in self.s.seen:
                self.report_finding(raw.parent.name, sig, str(raw))
        self._start_minimizations()
        fault = store_fault(self.config.crashes)  # what the store says now; a write below that fails says more
        self.s.storage = None if fault is None else refusal(self.config.crashes, fault)
        if self.s.unsaved and fault is None:
            for sig, finding in list(self.s.unsaved.items()):
                self._store(sig, finding, "stored after the store refused it")
        self._sync_dirty()
        return self.stats()

    def _start_minimizations(self) -> None:
        import ray

        while self.s.pending and len(self.s.minimizing) < max(self.config.minimizers, 1):
            sig = self.s.pending.popleft()
            seconds = min(self.config.run.minimize_seconds, self.deadline + self.config.drain_time - time.time() - 1)
            if seconds < MIN_MINIMIZE_SECONDS:
                self._store(sig, Path(self.s.seen[sig]), "no time left to minimize: stored as found")
                continue
            task = ray.remote(minimize_sandboxed).options(num_cpus=0, max_retries=MINIMIZE_RETRIES)
            run = self.config.run
            self.s.minimizing[sig] = task.remote(self.s.seen[sig], sig, run.candidate, run.reference, seconds,
                                                 run.fail_on)

    def _sync_dirty(self) -> None:
        leased = set(self.s.leases.values())
        for sig in list(self.s.dirty):
            if sig in self.s.known and sig not in leased:
                try:
                    sync_counts(self.config.crashes / sig,
                                [p.parent for p in self.config.raw.glob(f"*/{sig}/verdict.json")])
                except OSError as exc:
                    self._refused(self.config.crashes / sig, exc)
                    return
                self.s.dirty.discard(sig)

    def finish(self, fallback: str) -> dict[str, Any]:
        """The end: stop uncollected minimisations, store every signature without a bundle as found, write what the
        store still refuses into ``fallback``. Returns the stats, with ``kept`` (fallback dir or None) and ``lost``."""
        import ray

        for sig, raw in raw_signatures(self.config).items():
            if sig not in self.s.seen:
                self.report_finding(raw.parent.name, sig, str(raw))
        for sig, ref in list(self.s.minimizing.items()):
            ray.cancel(ref, force=True)
            del self.s.minimizing[sig]
            self.s.pending.appendleft(sig)
        while self.s.pending:
            sig = self.s.pending.popleft()
            self._store(sig, Path(self.s.seen[sig]), "the campaign ended before its minimisation: stored as found")
        for sig, finding in list(self.s.unsaved.items()):
            self._store(sig, finding, "stored after the store refused it")
        kept, lost = None, []
        for sig, finding in self.s.unsaved.items():
            try:
                if isinstance(finding, Path):
                    store_as_found(finding, Path(fallback), None)
                else:
                    store_finding(finding, Path(fallback), None)
            except OSError as exc:
                lost.append(sig)
                self._event(sig, f"lost: neither the store nor {fallback} took it ({exc.strerror or exc})")
                continue
            kept = fallback
            self._event(sig, f"kept in {Path(fallback) / sig}: the store refused it")
        return {**self.stats(), "kept": kept, "lost": lost}

    # -- verification

    def _enqueue(self, sig: str) -> None:
        """Queue ``sig`` for the engine verifiers where the engine confirms its class (a poisoned slot)."""
        if self.config.verifiers > 0 and sig not in self.s.queue and class_of_signature(sig).confirm_on_engine:
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
            try:
                update_verdict(self.config.crashes / sig, confirmed=state, confirmation={"error": error})
            except OSError as exc:  # unrecorded: the bundle stays unverified and the next campaign verifies it
                self._refused(self.config.crashes / sig, exc)
        self.s.states[sig] = state
        self._event(sig, f"verified: {state}")
        if state == "confirmed":
            self._file(sig)

    def _file(self, sig: str) -> None:
        repo, bundle = self.config.file_issues, self.config.crashes / sig
        if repo is None or (bundle / "issue.json").exists() or (self.config.dry_run_issues and
                                                                (bundle / "issue.md").exists()):
            return
        try:
            result = file_issue(bundle, repo, self.config.dry_run_issues)
        except Exception as exc:  # FilingError, BundleError, a refused write: reported, retried on the next campaign
            self._event(sig, f"filing failed: {exc}")
            return
        self._event(sig, f"issue {result.action}" + (f" {result.url}" if result.url else ""))

    # -- reporting

    def _event(self, sig: str, what: str) -> None:
        self.s.events.append(_Event(round(time.time() - self.started, 1), sig, what))

    def drained(self) -> bool:
        """No minimisation queued or running: what the driver waits for after the deadline."""
        return not self.s.pending and not self.s.minimizing

    def idle(self) -> bool:
        return self.drained() and not self.s.leases and (self.config.verifiers == 0 or not self.s.queue)

    def stats(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "signatures": len(self.s.known), "seen": sorted(set(self.s.seen) | self.s.known | set(self.s.unsaved)),
                "minimizing": len(self.s.minimizing), "pending": len(self.s.pending), "queue": len(self.s.queue),
                "verifying": len(self.s.leases), "states": dict(self.s.states), "idle": self.idle(),
                "drained": self.drained(), "unsaved": sorted(self.s.unsaved), "storage": self.s.storage,
                "events": [(e.seconds, e.signature, e.what) for e in self.s.events]}
