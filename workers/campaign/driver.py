"""The campaign driver: start Ray (embedded locally, or connect to a cluster), run the actors, report.

``Campaign(config).run()`` starts one crash store, ``config.fuzzers`` fuzzer
actors (each its own libFuzzer seed and working queue), ``config.verifiers``
verifier actors (``num_gpus`` when the cluster has GPUs), then until the
deadline: every ``stats_every`` seconds appends one stats row per actor
(:mod:`fuzz.store.stats`) and prints one progress line on stderr, schedules a corpus
merge every ``merge_every`` seconds (never two at once), rewrites the dashboard
every ``dashboard_every`` seconds. At the deadline it stops the fuzzers, lets
the crash store drain (pending minimizations and verifications, up to
``drain_time`` seconds), stops the verifiers and writes the final dashboard. With
``config.verify_fixed`` it first runs one task that replays every stored finding against the installed
vLLM (``tasks.verify_fixed_task``) and prints what it found, before any actor starts, so the crash
store stays the only writer of the bundles while it runs.

Invariant: the driver holds nothing the campaign needs to resume; it only
reads the actors' state and writes the stats file and the dashboard.

Resources: on the embedded local Ray the CPU count is the machine's; when the
actors ask for more CPUs than that (2 fuzzers, a CPU verifier and tasks on 2
cores), each asks for ``cpu_share < 1`` so that all of them are placed (the
OS then shares the cores). On a cluster each asks for one CPU. The embedded
Ray runs its workers at niceness 0, as ``gdnfuzz run`` runs its harness (Ray's
default of 15 starves the fuzzers on a machine that is busy with anything
else); a cluster keeps its own setting.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from fuzz.store.stats import StatsRow, StatsWriter
from workers.campaign.config import CampaignConfig
from workers.campaign.crash_store import CrashStoreActor
from workers.campaign.fuzzer import FuzzerActor
from workers.campaign.tasks import merge_shared_corpus, verify_fixed_task
from workers.campaign.verifier import VerifierActor

LOCAL = "local"
LOCAL_START_ATTEMPTS = 3
ACTOR_OPTIONS = {"max_restarts": -1, "max_task_retries": -1}  # a killed actor is restarted; its calls retried


@dataclass
class DriverSettings:
    address: str = LOCAL
    stats: Path = Path("stats.jsonl")
    dashboard: Path | None = None
    stats_every: float = 5.0
    dashboard_every: float = 60.0
    namespace: str = "gdnfuzz"


@dataclass
class CampaignSummary:
    seconds: float
    execs: int
    signatures: dict[str, str | None]  # signature -> confirmed state
    events: list[tuple[float, str, str]]
    restarts: dict[str, int]
    merges: list[Any] = field(default_factory=list)


def cpu_share(cpus: float, config: CampaignConfig, gpus: float) -> float:
    """The CPUs each actor and task asks for so that every fuzzer, CPU verifier and one task fit on ``cpus``."""
    demand = config.fuzzers + (0 if gpus else config.verifiers) + 1
    return min(1.0, math.floor(cpus / demand * 1000) / 1000)  # rounded down: the shares must fit exactly


class Campaign:
    """One campaign run; ``start`` / ``poll`` / ``finish`` are separate so a test can act between them."""

    def __init__(self, config: CampaignConfig, settings: DriverSettings, out: IO[str] = sys.stderr):
        self.config, self.settings, self.out = config, settings, out
        self.fuzzers: dict[str, Any] = {}
        self.verifiers: dict[str, Any] = {}
        self.crash_store: Any = None
        self.started = time.time()
        self.deadline = self.started + config.run.max_time
        self._own_ray = False
        self._base: dict[str, int] = {}  # execs of an actor's earlier incarnations
        self._last: dict[str, dict[str, Any]] = {}
        self._pids: dict[str, set[int]] = {}
        self._store: dict[str, Any] = {}
        self._merge: Any = None
        self._last_merge = self._last_dashboard = time.time()
        self.merges: list[Any] = []
        self.stats = StatsWriter(settings.stats)

    # -- start

    def _init_ray(self) -> None:
        import ray

        if ray.is_initialized():
            return
        env = {"env_vars": {"VLLM_LOGGING_LEVEL": "ERROR", "RAY_DEDUP_LOGS": "0"}}
        if self.settings.address == LOCAL:
            for attempt in range(LOCAL_START_ATTEMPTS):
                try:
                    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, namespace=self.settings.namespace,
                             object_store_memory=256 * 1024 ** 2, runtime_env=env, logging_level="ERROR",
                             _system_config={"worker_niceness": 0})
                    break
                except Exception as exc:  # Ray gives its raylet 30 s to register: too little on a loaded machine
                    ray.shutdown()
                    if attempt == LOCAL_START_ATTEMPTS - 1:
                        raise
                    print(f"gdnfuzz campaign: local Ray did not start ({exc}); retrying", file=self.out)
        else:
            ray.init(address=self.settings.address, namespace=self.settings.namespace, runtime_env=env,
                     logging_level="ERROR")
        self._own_ray = True

    def start(self) -> None:
        import ray

        self._init_ray()
        resources = ray.cluster_resources()
        gpus = resources.get("GPU", 0.0)
        share = cpu_share(resources.get("CPU", 1.0), self.config, gpus) if self.settings.address == LOCAL else 1.0
        self.config = replace(self.config, cpu_share=share)
        for d in (self.config.queue, self.config.raw):
            d.mkdir(parents=True, exist_ok=True)
        if self.config.verify_fixed:
            self._verify_fixed()
        remote = ray.remote(**ACTOR_OPTIONS)
        # the crash store is single-threaded (its state has one writer); the others answer stats() during stop()
        self.crash_store = remote(CrashStoreActor).options(num_cpus=0, max_concurrency=1).remote(
            self.config, self.started)
        for i in range(self.config.fuzzers):
            name = f"fuzzer-{i}"
            self.fuzzers[name] = remote(FuzzerActor).options(num_cpus=share, max_concurrency=2).remote(
                name, self.config.run.seed + i, self.config, self.crash_store, self.deadline)
        verifier_resources = {"num_gpus": self.config.gpus_per_verifier} if gpus else {}
        for i in range(self.config.verifiers):
            name = f"verifier-{i}"
            self.verifiers[name] = remote(VerifierActor).options(num_cpus=share, max_concurrency=2,
                                                                 **verifier_resources).remote(
                name, self.config, self.crash_store)
        where = "embedded local Ray" if self.settings.address == LOCAL else f"Ray at {self.settings.address}"
        print(f"gdnfuzz campaign: {where}: {self.config.fuzzers} fuzzers, {self.config.verifiers} verifiers "
              f"({'GPU' if gpus else 'CPU'}), {share} CPU each, {self.config.run.max_time:.0f}s", file=self.out,
              flush=True)

    # -- poll

    def _gather(self, handles: dict[str, Any], timeout: float) -> dict[str, dict[str, Any]]:
        """Each actor's ``stats()``; an actor that does not answer in time (restarting) keeps its last answer."""
        import ray

        refs = {name: h.stats.remote() for name, h in handles.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        done = set(ready)
        for name, ref in refs.items():
            if ref not in done:
                continue
            try:
                stats = ray.get(ref)
            except ray.exceptions.RayActorError:
                continue
            pids = self._pids.setdefault(name, set())
            if pids and stats["pid"] not in pids:  # a new incarnation counts from zero again
                self._base[name] = self._base.get(name, 0) + self._last.get(name, {}).get("execs", 0)
            pids.add(stats["pid"])
            if stats.get("error") and stats["error"] != self._last.get(name, {}).get("error"):
                print(f"gdnfuzz campaign: {name} failed:\n{stats['error']}", file=self.out, flush=True)
            self._last[name] = stats
        return {name: self._last[name] for name in handles if name in self._last}

    def poll(self) -> dict[str, Any]:
        """One round: stats rows, progress line, merge and dashboard scheduling; returns the latest stats."""
        import ray

        fuzzers = self._gather(self.fuzzers, timeout=5)
        verifiers = self._gather(self.verifiers, timeout=2)
        with contextlib.suppress(ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
            self._store = ray.get(self.crash_store.tick.remote(), timeout=30)  # else: the last answer stands
        now = time.time()
        for name, s in fuzzers.items():
            self.stats.write(StatsRow(now, name, execs=self._base.get(name, 0) + s["execs"],
                                      exec_per_s=float(s["exec_per_s"]), coverage=s["coverage"],
                                      corpus_size=s["corpus"]))
        for name, s in verifiers.items():
            self.stats.write(StatsRow(now, name, execs=s["done"]))
        if self._store:
            self.stats.write(StatsRow(now, "crash-store", findings=self._store["signatures"],
                                      verifier_queue=self._store["queue"]))
        self._schedule_merge(now)
        if self.settings.dashboard and now - self._last_dashboard >= self.settings.dashboard_every:
            self.write_dashboard()
        print(self.progress_line(fuzzers), file=self.out, flush=True)
        return {"fuzzers": fuzzers, "verifiers": verifiers, "crash_store": self._store}

    def progress_line(self, fuzzers: dict[str, dict[str, Any]]) -> str:
        cs = self._store or {}
        states = list((cs.get("states") or {}).values())
        execs = sum(self._base.get(n, 0) + s["execs"] for n, s in fuzzers.items())
        return (f"[{time.time() - self.started:6.0f}s] execs {execs} "
                f"exec/s {sum(s['exec_per_s'] for s in fuzzers.values())} "
                f"cov {max((s['coverage'] for s in fuzzers.values()), default=0)} "
                f"corpus {max((s['corpus'] for s in fuzzers.values()), default=0)} "
                f"signatures {cs.get('signatures', 0)} minimizing {cs.get('minimizing', 0)} "
                f"verify-queue {cs.get('queue', 0)} confirmed {states.count('confirmed')} "
                f"restarts {sum(s['restarts'] for s in fuzzers.values()) + self.actor_restarts()}")

    def actor_restarts(self) -> int:
        return sum(len(p) - 1 for p in self._pids.values())

    def _schedule_merge(self, now: float) -> None:
        import ray

        if self._merge is not None and ray.wait([self._merge], timeout=0)[0]:
            try:
                report = ray.get(self._merge)
                self.merges.append(report)
                print(f"gdnfuzz campaign: merged {report.candidates} inputs into {report.kept} "
                      f"(+{report.features} features over seeds) in {report.seconds:.0f}s", file=self.out)
            except Exception as exc:  # MergeError: the corpus was left as it was
                print(f"gdnfuzz campaign: corpus merge failed: {exc}", file=self.out)
            self._merge, self._last_merge = None, now
        due = self.config.merge_every and now - self._last_merge >= self.config.merge_every
        if self._merge is None and due and now < self.deadline - self.config.merge_every / 2:
            task = ray.remote(merge_shared_corpus).options(num_cpus=self.config.cpu_share, max_retries=0)
            self._merge = task.remote(self.config)

    def _verify_fixed(self) -> None:
        """The verify-fixed task (before any actor starts), one printed line per bundle."""
        import ray

        task = ray.remote(verify_fixed_task).options(num_cpus=self.config.cpu_share, max_retries=0)
        try:
            lines = ray.get(task.remote(self.config))
        except Exception as exc:  # a bad bundle or an API failure: the campaign goes on without it
            lines = [f"failed: {exc}"]
        for line in lines:
            print(f"gdnfuzz campaign: verify-fixed: {line}", file=self.out, flush=True)

    def write_dashboard(self) -> None:
        from fuzz.report.dashboard import write_dashboard

        if self.settings.dashboard is not None:
            write_dashboard(self.settings.stats, self.config.crashes, self.settings.dashboard)
        self._last_dashboard = time.time()

    # -- finish

    def finish(self) -> CampaignSummary:
        import ray

        ray.get([f.stop.remote() for f in self.fuzzers.values()], timeout=120)
        if self._merge is not None:
            ray.wait([self._merge], timeout=60)
            self._schedule_merge(time.time())
            if self._merge is not None:
                ray.cancel(self._merge, force=True)  # the merge changes nothing until libFuzzer has finished
        drain_until = time.time() + self.config.drain_time
        stats = self.poll()
        while not stats["crash_store"].get("idle", True) and time.time() < drain_until:
            time.sleep(self.settings.stats_every)
            stats = self.poll()
        ray.get([v.stop.remote() for v in self.verifiers.values()], timeout=60)
        stats = self.poll()
        self.write_dashboard()
        self.stats.close()
        for handle in [*self.fuzzers.values(), *self.verifiers.values(), self.crash_store]:
            ray.kill(handle, no_restart=True)
        if self._own_ray:
            ray.shutdown()
        cs = stats["crash_store"]
        restarts = {n: s["restarts"] + max(len(self._pids.get(n, ())) - 1, 0) for n, s in stats["fuzzers"].items()}
        execs = sum(self._base.get(n, 0) + s["execs"] for n, s in stats["fuzzers"].items())
        return CampaignSummary(time.time() - self.started, execs, cs.get("states", {}), cs.get("events", []),
                               restarts, self.merges)

    def run(self) -> CampaignSummary:
        self.start()
        try:
            while time.time() < self.deadline:
                time.sleep(min(self.settings.stats_every, max(self.deadline - time.time(), 0)))
                self.poll()
        except KeyboardInterrupt:
            print("gdnfuzz campaign: interrupted; stopping", file=self.out)
        return self.finish()
