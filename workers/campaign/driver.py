"""The campaign driver: start Ray (embedded, or a cluster), run crash store, fuzzers and verifiers, report.

Invariants: the driver holds nothing needed to resume (the crash store runs on the head's node); every Ray wait
has a timeout, so the end is at most ``drain_time`` + :data:`STOP_TIMEOUT` + :data:`STORE_TIMEOUT` past the
deadline; every finding seen counts (the driver stores raw ones if the crash store is unreachable); a lost head
is :class:`HeadLost`; ``verify_fixed`` runs before any actor starts. Embedded Ray: niceness 0, loopback only."""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from fuzz.errors import StorageError, ToolError
from fuzz.plural import plural
from fuzz.search.libfuzzer import sum_profiles
from fuzz.search.profiles import MIXED, home_of
from fuzz.store.atomic import sweep_leftovers
from fuzz.store.corpus_merge import list_inputs
from fuzz.store.stats import CAMPAIGN, CLUSTER, PROFILE_PREFIX, StatsRow
from workers.campaign.config import CampaignConfig
from workers.campaign.crash_store import CrashStoreActor, raw_signatures, store_unminimized
from workers.campaign.fuzzer import FuzzerActor
from workers.campaign.liveness import ActorView, ActorWatch, Capacity, ClusterWatch, head_reachable
from workers.campaign.loopback import is_loopback, use_loopback
from workers.campaign.ray_output import quiet_ray_output
from workers.campaign.stats_log import StatsLog
from workers.campaign.tasks import merge_shared_corpus, verify_fixed_task
from workers.campaign.verifier import VerifierActor

LOCAL = "local"
LOCAL_START_ATTEMPTS = 3
CALL_TIMEOUT = 5.0  # seconds a stats round waits for the actors
STOP_TIMEOUT = 5.0  # seconds the fuzzers and verifiers get to stop at the end
STORE_TIMEOUT = 20.0  # seconds the crash store gets to store what is left at the end
HEAD_LOST_CHECKS = 2  # checks in a row (two a round) without the head's GCS port: the head is lost
HEAD_RESOURCE = "node:__internal_head__"  # the resource Ray gives the head node


class HeadLost(ToolError):
    """The Ray head stopped answering: one line saying what is saved on the shared store and how to resume."""


@dataclass
class DriverSettings:
    address: str = LOCAL
    stats: Path = Path("stats.jsonl")
    dashboard: Path | None = None
    stats_every: float = 5.0
    dashboard_every: float = 60.0
    namespace: str = "gdnfuzz"
    carried: dict[str, int] = field(default_factory=dict)  # execs per actor from earlier runs (--resume)
    fallback: Path | None = None  # where findings the store refuses at the end are kept (default: a temporary dir)
    versions: tuple[dict[str, str], ...] = ()  # what each run of the campaign ran against (the dashboard names them)


@dataclass
class CampaignSummary:
    seconds: float
    execs: int
    signatures: dict[str, str | None]  # every signature seen -> confirmed state
    events: list[tuple[float, str, str]]
    restarts: dict[str, int]
    merges: list[Any] = field(default_factory=list)
    storage: StorageError | None = None  # a store still refused writes at the end
    faults: list[str] = field(default_factory=list)  # storage faults met during the run, one line each
    lost: list[str] = field(default_factory=list)  # findings no store took (only in this summary)


def cpu_share(cpus: float, config: CampaignConfig, gpus: float) -> float:
    """The CPUs each actor and task asks for so that every fuzzer, CPU verifier and one task fit on ``cpus``."""
    demand = config.fuzzers + (0 if gpus else config.verifiers) + 1
    return min(1.0, math.floor(cpus / demand * 1000) / 1000)  # rounded down: the shares must fit exactly


def _refusal(report: Any, kept: str | None = None) -> StorageError | None:
    """An actor's ``storage`` report (path, errno, strerror) as the StorageError it stands for."""
    if not report:
        return None
    path, number, text = report
    return StorageError(path, OSError(number, text), kept=kept)


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
        self._gcs = ""
        self._head_misses = 0
        self.fuzzer_watch = ActorWatch([f"fuzzer-{i}" for i in range(config.fuzzers)], settings.carried)
        self.verifier_watch = ActorWatch([f"verifier-{i}" for i in range(config.verifiers)], settings.carried)
        self.store_watch = ActorWatch(["crash-store"], {})
        self.cluster = ClusterWatch()
        self._capacity = Capacity(0, 0, 0.0, 0.0)
        self._store: dict[str, Any] = {}
        self._states: dict[str, str] = {}
        self._merge: Any = None
        self._last_merge = self._last_dashboard = time.time()
        self.merges: list[Any] = []
        self.faults: dict[str, StorageError] = {}  # where -> the storage fault there now
        self.fault_log: list[str] = []
        self._dashboard_fault: StorageError | None = None
        self.stats: StatsLog | None = None

    # -- start

    def _init_ray(self) -> None:
        if is_loopback(self.settings.address):
            use_loopback()
        quiet_ray_output()
        import ray

        if ray.is_initialized():
            self._gcs = ray.get_runtime_context().gcs_address
            return
        env = {"env_vars": {"VLLM_LOGGING_LEVEL": "ERROR", "RAY_DEDUP_LOGS": "0"}}
        if self.settings.address == LOCAL:
            for attempt in range(LOCAL_START_ATTEMPTS):
                try:
                    ray.init(address=LOCAL, num_cpus=os.cpu_count(), include_dashboard=False,
                             namespace=self.settings.namespace,
                             object_store_memory=256 * 1024 ** 2, runtime_env=env, logging_level="ERROR",
                             log_to_driver=False, _system_config={"worker_niceness": 0})
                    break
                except Exception as exc:  # Ray gives its raylet 30 s to register: too little on a loaded machine
                    ray.shutdown()
                    if attempt == LOCAL_START_ATTEMPTS - 1:
                        raise
                    print(f"gdnfuzz campaign: local Ray did not start ({exc}); retrying", file=self.out)
        else:
            ray.init(address=self.settings.address, namespace=self.settings.namespace, runtime_env=env,
                     logging_level="ERROR", log_to_driver=False)
        self._own_ray = True
        self._gcs = ray.get_runtime_context().gcs_address

    def start(self) -> None:
        try:
            for d in (self.config.queue, self.config.raw):
                d.mkdir(parents=True, exist_ok=True)
            self.stats = StatsLog(self.settings.stats)
        except OSError as exc:
            raise StorageError(exc.filename or self.config.queue, exc) from None
        self._init_ray()  # first: Ray is imported only once its environment is set
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        resources = ray.cluster_resources()
        gpus = resources.get("GPU", 0.0)
        share = cpu_share(resources.get("CPU", 1.0), self.config, gpus) if self.settings.address == LOCAL else 1.0
        self.config = replace(self.config, cpu_share=share)
        if self.config.verify_fixed:
            self._verify_fixed()
        remote = ray.remote(max_restarts=self.config.max_restarts, max_task_retries=0)
        head = next((n["NodeID"] for n in ray.nodes() if n.get("Alive") and HEAD_RESOURCE in n.get("Resources", {})),
                    ray.get_runtime_context().get_node_id())
        # the crash store is single-threaded (its state has one writer) and runs on the head, never on a worker
        # node that can be lost (Ray's soft affinity placed it on one); the others find it by name
        store = f"crash-store-{self.started:.6f}"
        self.crash_store = remote(CrashStoreActor).options(
            name=store, num_cpus=0, max_concurrency=1, scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)
        ).remote(self.config, self.started, self.deadline)
        for i, name in enumerate(self.fuzzer_watch.views):
            self.fuzzers[name] = remote(FuzzerActor).options(num_cpus=share, max_concurrency=2,
                                                             scheduling_strategy="SPREAD").remote(
                name, self.config.run.seed + i, self.config, store, self.deadline,
                home_of(i, self.config.fuzzers) if self.config.run.profile == MIXED else None)
        verifier_resources = {"num_gpus": self.config.gpus_per_verifier} if gpus else {}
        for name in self.verifier_watch.views:
            self.verifiers[name] = remote(VerifierActor).options(num_cpus=share, max_concurrency=2,
                                                                 scheduling_strategy="SPREAD",
                                                                 **verifier_resources).remote(
                name, self.config, store)
        where = "embedded local Ray" if self.settings.address == LOCAL else f"Ray at {self.settings.address}"
        print(f"gdnfuzz campaign: {where}: {plural(self.config.fuzzers, 'fuzzer')}, "
              f"{plural(self.config.verifiers, 'verifier')} "
              f"({'GPU' if gpus else 'CPU'}), {share} CPU each, {self.config.run.max_time:.0f}s", file=self.out,
              flush=True)

    # -- poll

    def poll(self, timeout: float = CALL_TIMEOUT) -> dict[str, Any]:
        """One round: stats rows, progress line, merge and dashboard scheduling; returns the latest stats.
        Raises :class:`HeadLost` after :data:`HEAD_LOST_CHECKS` unanswered GCS checks in a row."""

        self._check_head()
        fuzzers = self.fuzzer_watch.gather(self.fuzzers, timeout)
        verifiers = self.verifier_watch.gather(self.verifiers, min(timeout, 2.0))
        store = self.store_watch.gather({"crash-store": self.crash_store}, timeout, method="tick")["crash-store"]
        self._store = store.stats or self._store
        self._check_head()
        self._capacity = self.cluster.poll(min(timeout, 2.0))
        now = time.time()
        self._note_states([*fuzzers.values(), *verifiers.values(), store])
        self._note_storage(now)
        self._write_rows(now, "running")
        self._schedule_merge(now)
        if self.settings.dashboard and now - self._last_dashboard >= self.settings.dashboard_every:
            self.write_dashboard()
        print(self.progress_line(), file=self.out, flush=True)
        return {"fuzzers": {n: v.stats for n, v in fuzzers.items() if v.stats},
                "verifiers": {n: v.stats for n, v in verifiers.items() if v.stats}, "crash_store": self._store}

    def _check_head(self) -> None:
        if head_reachable(self._gcs):
            self._head_misses = 0
            return
        self._head_misses += 1
        if self._head_misses >= HEAD_LOST_CHECKS:
            raise HeadLost(f"lost the Ray head ({self._gcs} does not answer)")

    def _note_states(self, views: list[ActorView]) -> None:
        """One line per actor whose state changed since the last round (after it first answered)."""
        for view in views:
            before = self._states.get(view.name)
            if before is not None and before != view.state and view.state != "stopped":
                print(f"gdnfuzz campaign: {view.name}: {before} -> {view.state} (restarts {view.restarts})",
                      file=self.out, flush=True)
            if view.pids:
                self._states[view.name] = view.state

    def _note_storage(self, now: float) -> None:
        """The storage faults the actors and the stats file report now; one line when one starts or clears."""
        current: dict[str, StorageError] = {}
        for name, view in self.fuzzer_watch.views.items():
            fault = _refusal(view.stats.get("storage")) if view.state == "alive" else self.faults.get(name)
            if fault is not None:
                current[name] = fault
        store = _refusal(self._store.get("storage"))  # its last answer (its final one at the end)
        if store is not None:
            current["crash-store"] = store
        if self.stats is not None and self.stats.refused is not None:
            current["stats"] = StorageError(self.stats.refused.filename or self.settings.stats, self.stats.refused)
        if self._dashboard_fault is not None:
            current["dashboard"] = self._dashboard_fault
        for where in current.keys() - self.faults.keys():
            line = f"[{now - self.started:.0f}s] {where}: {current[where]}"
            self.fault_log.append(line)
            print(f"gdnfuzz campaign: storage fault: {line}", file=self.out, flush=True)
        for where in self.faults.keys() - current.keys():
            self.fault_log.append(f"[{now - self.started:.0f}s] {where}: the store takes writes again")
            print(f"gdnfuzz campaign: {where}: the store takes writes again", file=self.out, flush=True)
        self.faults = current

    def _write_rows(self, now: float, campaign_state: str) -> None:
        rows = [StatsRow(now, v.name, execs=v.execs, exec_per_s=v.exec_per_s, coverage=int(v.stats.get("coverage", 0)),
                         corpus_size=int(v.stats.get("corpus", 0)), state=v.state, restarts=v.restarts)
                for v in self.fuzzer_watch.views.values()]
        rows += [StatsRow(now, v.name, execs=int(v.stats.get("done", 0)), state=v.state, restarts=v.restarts)
                 for v in self.verifier_watch.views.values()]
        store = self.store_watch.views["crash-store"]
        rows.append(StatsRow(now, "crash-store", findings=len(self._store.get("seen", [])),
                             verifier_queue=int(self._store.get("queue", 0)), state=store.state,
                             restarts=store.restarts))
        c = self._capacity
        rows.append(StatsRow(now, CLUSTER, nodes=c.nodes, nodes_lost=c.nodes_lost, cpus=c.cpus, cpus_lost=c.cpus_lost))
        rows += self._profile_rows(now)
        rows.append(StatsRow(now, CAMPAIGN, state=campaign_state))
        if self.stats is not None:
            self.stats.write(rows)

    def _profile_rows(self, now: float) -> list[StatsRow]:
        """Under the mixture: each workload profile's figures summed over the fuzzers (``fuzz.store.stats``)."""
        views = list(self.fuzzer_watch.views.values())
        figures = [v.stats.get("profiles") or {} for v in views]
        total = sum_profiles(figures, shares_of=[f for f in figures if f])
        homes = {name: ", ".join(v.name for v in views if v.stats.get("home") == name) for name in total}
        return [StatsRow(now, PROFILE_PREFIX + name, execs=int(f["execs"]), seconds=float(f["seconds"]),
                         coverage=int(f["features"]), findings=int(f["findings"]), share=float(f["share"]),
                         homes=homes[name]) for name, f in total.items()]

    def progress_line(self) -> str:
        cs = self._store
        views = list(self.fuzzer_watch.views.values())
        states = list((cs.get("states") or {}).values())
        down = [v.name for v in [*views, *self.verifier_watch.views.values(), *self.store_watch.views.values()]
                if v.state not in ("alive", "starting", "stopped")]
        c = self._capacity
        return (f"[{time.time() - self.started:6.0f}s] execs {sum(v.execs for v in views)} "
                f"exec/s {sum(v.exec_per_s for v in views):g} "
                f"cov {max((int(v.stats.get('coverage', 0)) for v in views), default=0)} "
                f"corpus {max((int(v.stats.get('corpus', 0)) for v in views), default=0)} "
                f"signatures {len(cs.get('seen', []))} minimizing {cs.get('minimizing', 0)}+{cs.get('pending', 0)} "
                f"verify-queue {cs.get('queue', 0)} confirmed {states.count('confirmed')} "
                f"restarts {sum(v.restarts for v in views)} nodes {c.nodes}/{c.nodes + c.nodes_lost}"
                + (f" down {','.join(down)}" if down else "")
                + (f" storage-fault {','.join(sorted(self.faults))}" if self.faults else ""))

    def _schedule_merge(self, now: float) -> None:
        import ray

        if self._merge is not None and ray.wait([self._merge], timeout=0)[0]:
            try:
                report = ray.get(self._merge, timeout=0)
                self.merges.append(report)
                print(f"gdnfuzz campaign: merged {report.candidates} inputs into {report.kept} "
                      f"(+{report.features} features over seeds) in {report.seconds:.0f}s", file=self.out)
            except Exception as exc:  # MergeError, a lost node: the corpus was left as it was
                print(f"gdnfuzz campaign: corpus merge failed: {exc}", file=self.out)
            self._merge, self._last_merge = None, now
        due = self.config.merge_every and now - self._last_merge >= self.config.merge_every
        if self._merge is None and due and now < self.deadline - self.config.merge_every / 2:
            task = ray.remote(merge_shared_corpus).options(num_cpus=self.config.cpu_share, max_retries=0)
            self._merge = task.remote(self.config)

    def _verify_fixed(self) -> None:
        """The verify-fixed task (before any actor starts, within the campaign's time), one line per bundle."""
        import ray

        task = ray.remote(verify_fixed_task).options(num_cpus=self.config.cpu_share, max_retries=0)
        ref = task.remote(self.config)
        try:
            lines = ray.get(ref, timeout=max(self.deadline - time.time(), 1.0))
        except Exception as exc:  # a bad bundle, an API failure, the time: the campaign goes on without it
            ray.cancel(ref, force=True)
            lines = [f"failed: {type(exc).__name__}: {exc}"]
        for line in lines:
            print(f"gdnfuzz campaign: verify-fixed: {line}", file=self.out, flush=True)

    def write_dashboard(self) -> None:
        from fuzz.report.dashboard import write_dashboard

        self._last_dashboard = time.time()
        if self.settings.dashboard is None:
            return
        try:
            write_dashboard(self.settings.stats, self.config.crashes, self.settings.dashboard,
                            versions=self.settings.versions)
        except OSError as exc:
            self._dashboard_fault = StorageError(self.settings.dashboard, exc)
        else:
            self._dashboard_fault = None

    # -- finish

    def _stop(self, handles: dict[str, Any], watch: ActorWatch) -> None:
        """Ask every actor to stop, wait at most STOP_TIMEOUT, then kill them (no restart) and forget them."""
        import ray

        refs = [h.stop.remote() for h in handles.values()]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=STOP_TIMEOUT)
        for handle in handles.values():
            ray.kill(handle, no_restart=True)
        handles.clear()
        watch.mark("stopped")

    def _drain(self) -> None:
        """Give the minimisations in flight until the end of the drain (they stop by then themselves)."""
        until = self.deadline + self.config.drain_time
        while time.time() < until and not self._store.get("drained", True):
            time.sleep(min(1.0, max(until - time.time(), 0.0)))
            self.poll(timeout=min(CALL_TIMEOUT, max(until - time.time(), 0.5)))

    def _store_the_rest(self) -> dict[str, Any]:
        """The crash store stores the rest as found (refused: the fallback); if unreachable, killed: the driver does."""
        import ray

        fallback = self.settings.fallback or Path(tempfile.gettempdir()) / f"gdnfuzz-kept-{int(self.started)}"
        ref = self.crash_store.finish.remote(str(fallback))
        try:
            return ray.get(ref, timeout=STORE_TIMEOUT)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as exc:
            ray.kill(self.crash_store, no_restart=True)
            print(f"gdnfuzz campaign: the crash store did not answer at the end ({type(exc).__name__}); "
                  "storing the raw findings as found", file=self.out, flush=True)
        try:
            stored = store_unminimized(self.config)
        except OSError as exc:
            self.faults["crash-store"] = StorageError(exc.filename or self.config.crashes, exc)
            stored = []
        events = [(round(time.time() - self.started, 1), sig, "stored as found by the driver") for sig in stored]
        return {**self._store, "events": [*self._store.get("events", []), *events], "kept": None, "lost": []}

    def finish(self) -> CampaignSummary:
        import ray

        self._stop(self.fuzzers, self.fuzzer_watch)
        if self._merge is not None:
            ray.cancel(self._merge, force=True)  # the merge changes nothing until libFuzzer has finished
        self._drain()
        final = self._store_the_rest()
        self._store = final
        self._stop(self.verifiers, self.verifier_watch)
        ray.kill(self.crash_store, no_restart=True)
        self.store_watch.mark("stopped")
        for root in (self.config.crashes, self.config.run.corpus):
            sweep_leftovers(root)  # every writer has stopped: what a killed one left half-written goes
        self._note_storage(time.time())
        self._write_rows(time.time(), "ended")
        self.write_dashboard()
        if self.stats is not None:
            self.stats.close()
        if self._own_ray:
            ray.shutdown()
        return self._summary(final)

    def _summary(self, final: dict[str, Any]) -> CampaignSummary:
        states: dict[str, str | None] = dict(final.get("states", {}))
        for sig in [*final.get("seen", []), *raw_signatures(self.config)]:
            states.setdefault(sig, None)
        storage = _refusal(final.get("storage"), final.get("kept")) if final.get("unsaved") else None
        if storage is None and self.faults:
            storage = next(iter(self.faults.values()))
        views = self.fuzzer_watch.views.values()
        return CampaignSummary(time.time() - self.started, sum(v.execs for v in views), states,
                               final.get("events", []), {v.name: v.restarts for v in views}, self.merges,
                               storage, self.fault_log, list(final.get("lost", [])))

    # -- a lost head

    def saved_line(self) -> str:
        """What the shared store holds now, and the command that continues the campaign."""
        bundles = sum(1 for _ in self.config.crashes.glob("*/verdict.json"))
        raw = [sig for sig in raw_signatures(self.config) if not (self.config.crashes / sig / "verdict.json").exists()]
        address = "" if self.settings.address == LOCAL else f" --address {self.settings.address}"
        return (f"saved on the shared store: {len(list_inputs(self.config.queue))} corpus inputs, {bundles} bundles, "
                f"{len(raw)} findings not yet minimized (raw), stats in {self.settings.stats}; "
                f"resume with: gdnfuzz campaign --resume --crashes {self.config.crashes}{address}")

    def lost_head(self, exc: HeadLost) -> HeadLost:
        """Stop the fuzzers that still answer, record the loss, and return the one-line error to raise."""
        import ray

        refs = [h.stop.remote() for h in self.fuzzers.values()]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=STOP_TIMEOUT)
        self.fuzzer_watch.mark("unreachable")
        self._write_rows(time.time(), "head-lost")
        self.write_dashboard()  # the page says the head was lost, not that the campaign still runs
        if self.stats is not None:
            self.stats.close()
        lost = HeadLost(f"{exc} after {time.time() - self.started:.0f}s; {self.saved_line()}")
        if self._own_ray:
            ray.shutdown()  # about 15 s without a head; Ray itself ends a process that waits on it for 60 s
        return lost

    def run(self) -> CampaignSummary:
        self.start()
        try:
            try:
                while time.time() < self.deadline:
                    time.sleep(min(self.settings.stats_every, max(self.deadline - time.time(), 0)))
                    self.poll(timeout=min(CALL_TIMEOUT, max(self.deadline - time.time(), 0.5)))
            except KeyboardInterrupt:
                print("gdnfuzz campaign: interrupted; stopping", file=self.out)
            return self.finish()
        except HeadLost as exc:
            raise self.lost_head(exc) from None
