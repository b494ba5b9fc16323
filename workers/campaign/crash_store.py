"""The crash store actor: dedups findings by signature, minimizes each new one, queues it for a
verifier, files confirmed ones. One writer of ``crashes/<signature>/`` (see ``workers.campaign.config``).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.oracle.verdict import class_of_signature
from fuzz.reduce.minimize import minimize_raw_bundle
from fuzz.report.finding_report import store_finding
from fuzz.report.github import file_issue
from fuzz.search.artifacts import crash_finding
from fuzz.store.bundle import count_occurrence, load_verdict, sync_counts, update_verdict
from workers.campaign.config import CampaignConfig

ARTIFACT_KINDS = {"crash": "worker-crash", "timeout": "hang", "oom": "worker-oom"}
UNVERIFIABLE = tuple(ARTIFACT_KINDS.values())  # findings the engine confirm does not apply to
MAX_VERIFY_ATTEMPTS = 2


@dataclass
class _Event:
    seconds: float
    signature: str
    what: str


@dataclass
class CrashStoreState:
    """What the crash store is doing now; rebuilt from disk by :meth:`CrashStoreActor.resume`."""

    known: set[str] = field(default_factory=set)  # signatures with a bundle in crashes/
    minimizing: dict[str, Any] = field(default_factory=dict)  # signature -> ObjectRef of its task
    given_up: set[str] = field(default_factory=set)  # did not reproduce when minimized
    queue: deque[str] = field(default_factory=deque)  # waiting for a verifier
    leases: dict[str, str] = field(default_factory=dict)  # verifier -> signature it is confirming
    attempts: Counter[str] = field(default_factory=Counter)
    dirty: set[str] = field(default_factory=set)  # hits to sync into crashes/<sig>/verdict.json
    states: dict[str, str | None] = field(default_factory=dict)  # signature -> confirmed state
    events: list[_Event] = field(default_factory=list)


class CrashStoreActor:
    """Dedups findings by signature, minimizes each new one, queues it for a verifier, files confirmed ones."""

    def __init__(self, config: CampaignConfig, started: float):
        self.config, self.started = config, started
        self.s = CrashStoreState()
        config.raw.mkdir(parents=True, exist_ok=True)
        (config.raw / "reported").mkdir(exist_ok=True)
        self.resume()

    # -- resume from disk

    def resume(self) -> None:
        for verdict_file in sorted(self.config.crashes.glob("*/verdict.json")):
            data = load_verdict(verdict_file)
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
        if sig in self.s.known or sig in self.s.minimizing or sig in self.s.given_up:
            return
        import ray

        self._event(sig, f"found by {actor}")
        task = ray.remote(minimize_raw_bundle).options(num_cpus=self.config.cpu_share, max_retries=2)
        run = self.config.run
        self.s.minimizing[sig] = task.remote(raw_bundle, sig, run.candidate, run.reference, run.minimize_seconds,
                                             run.fail_on)

    def report_artifact(self, actor: str, artifact: str, kind: str, log_tail: str) -> str:
        """Save (or count) the finding for a libFuzzer artifact, then move the artifact to raw/reported/."""
        path = Path(artifact)
        finding = crash_finding(kind, path.read_bytes(), log_tail, self.config.run.candidate, self.config.run.reference,
                                artifact=path.name)
        if finding.signature in self.s.known:
            bundle = self.config.crashes / finding.signature
            count_occurrence(bundle)
        else:
            store_finding(finding, self.config.crashes, None)
            self.s.known.add(finding.signature)
            self.s.states[finding.signature] = None
            self._event(finding.signature, f"{kind} of {actor}")
        shutil.move(str(path), self.config.raw / "reported" / path.name)
        return finding.signature

    def tick(self) -> dict[str, Any]:
        """Collect finished minimizations, sync hit counts; returns the stats (called by the driver)."""
        import ray

        for sig, ref in list(self.s.minimizing.items()):
            if not ray.wait([ref], timeout=0)[0]:
                continue
            del self.s.minimizing[sig]
            try:
                finding = ray.get(ref)
            except Exception as exc:  # the task's own error, after Ray's retries for a dead worker
                print(f"gdnfuzz campaign: minimizing {sig} failed: {exc}", file=sys.stderr)
                finding = None
            if finding is None:
                self.s.given_up.add(sig)
                self._event(sig, "did not reproduce")
                continue
            store_finding(finding, self.config.crashes, self.config.regressions)
            self.s.known.add(sig)
            self.s.states[sig] = None
            self._event(sig, "minimized")
            self._enqueue(sig)
        leased = set(self.s.leases.values())
        for sig in list(self.s.dirty):
            if sig in self.s.known and sig not in leased:
                self._sync_hits(sig)
                self.s.dirty.discard(sig)
        return self.stats()

    def _sync_hits(self, sig: str) -> None:
        sync_counts(self.config.crashes / sig, [p.parent for p in self.config.raw.glob(f"*/{sig}/verdict.json")])

    # -- verification

    def _enqueue(self, sig: str) -> None:
        """Queue ``sig`` for the engine verifiers where its class is confirmed there (the engine confirms
        a poisoned slot; a cost the sim tier measures exactly needs no confirmation)."""
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
            update_verdict(self.config.crashes / sig, confirmed=state, confirmation={"error": error})
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
        except Exception as exc:  # FilingError, BundleError: reported, retried on the next campaign
            print(f"gdnfuzz campaign: filing {sig}: {exc}", file=sys.stderr)
            return
        self._event(sig, f"issue {result.action}" + (f" {result.url}" if result.url else ""))

    # -- reporting

    def _event(self, sig: str, what: str) -> None:
        self.s.events.append(_Event(round(time.time() - self.started, 1), sig, what))

    def idle(self) -> bool:
        return not self.s.minimizing and not self.s.leases and (self.config.verifiers == 0 or not self.s.queue)

    def stats(self) -> dict[str, Any]:
        return {"signatures": len(self.s.known), "minimizing": len(self.s.minimizing), "queue": len(self.s.queue),
                "verifying": len(self.s.leases), "states": dict(self.s.states), "idle": self.idle(),
                "events": [(e.seconds, e.signature, e.what) for e in self.s.events]}
