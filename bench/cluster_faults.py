"""Cluster faults: campaigns on a multi-node local Ray cluster (127.0.0.1 only), a scripted schedule of faults,
and what each fault cost; then aggregate exec/s with 1, 2 and 3 local nodes against the same run without Ray.

Usage: ``python bench/cluster_faults.py [--checkout DIR] [--only faults,capacity,head,scaling] [--dir DIR]``

Every cluster is ``ray.cluster_utils.Cluster`` on this machine: a head (the driver and the crash store,
no CPU) and worker nodes of one CPU, all on 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in every
Ray process; ``RAY_TMPDIR`` private, so no other Ray user's address file is touched). ``gdnfuzz campaign
--address <head>`` runs as a subprocess with ``PYTHONPATH`` = ``--checkout`` (default this checkout; an
older checkout measures "before"), candidate pre-51113 (the seed bug and others are found within a minute).

- ``faults``: 3 worker nodes, 2 fuzzers, ``--max-time`` 360, and on schedule: the store (corpus and crash
  store) read-only for 40 s then writable (a read-only bind mount as root, chmod otherwise); the worker
  node of fuzzer-0 SIGKILLed (a spare node can take it); the node of fuzzer-1 removed gracefully, with no
  spare, and a node added 15 s later; the crash store's actor SIGKILLed. Each fault's line says what it cost.
- ``capacity``: one node of 2 CPUs, 2 fuzzers, 0 verifiers (every CPU held by a fuzzer): are findings minimized?
- ``head``: the head killed mid-campaign: how the driver ends; then ``campaign --resume`` on a new cluster.
- ``scaling``: aggregate exec/s of campaigns on 1, 2 and 3 nodes of one CPU, and of ``gdnfuzz run -j1``, all
  vllm against vllm (no findings: the fuzzing loop alone) for the same time; the rate is execs from the first
  to the last report over that span (start-up excluded), from the stats file or ``run``'s status lines.

After every campaign the store is checked: every bundle (minimized and raw) loads with ``load_bundle``,
every stats line reads back, no queue file torn (named by a SHA-1 that is not its content's), no stray
temporary file, no bundle directory without its ``verdict.json``; a finding is lost when a raw bundle or a
harness artifact of its signature exists and no stored bundle (nor one in the fallback directory the run
named) does. Prints figures and verdicts; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: every Ray process on 127.0.0.1
os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rcf-", dir="/tmp")  # short: Ray's socket paths live there
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from storage_faults import make_read_only, make_writable  # noqa: E402

from fuzz.errors import InputError  # noqa: E402
from fuzz.store.bundle import load_bundle  # noqa: E402
from fuzz.store.corpus_merge import CONTENT_NAME, content_name, list_inputs  # noqa: E402
from fuzz.store.stats import read_stats  # noqa: E402

NODE_MEMORY = 80 * 1024 ** 2
STATUS_LINE = re.compile(r"\[\s*(\d+)s\] execs (\d+) ")


# ---------------------------------------------------------------- the cluster


class LocalCluster:
    """A head with no CPU and worker nodes of ``cpus`` CPUs each, on 127.0.0.1."""

    def __init__(self, nodes: int, cpus: float = 1, head_cpus: float = 0):
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": head_cpus, "include_dashboard": False, "object_store_memory": NODE_MEMORY})
        for _ in range(nodes):
            self.add(cpus)

    @property
    def address(self) -> str:
        return self.cluster.address

    def add(self, cpus: float = 1) -> Any:
        return self.cluster.add_node(num_cpus=cpus, object_store_memory=NODE_MEMORY)

    def remove(self, node: Any, graceful: bool) -> None:
        self.cluster.remove_node(node, allow_graceful=graceful)

    def raylets(self) -> dict[int, Any]:
        """raylet pid -> its node (the head included)."""
        nodes = [self.cluster.head_node, *self.cluster.worker_nodes] if self.cluster.head_node else \
            list(self.cluster.worker_nodes)
        return {n.all_processes["raylet"][0].process.pid: n for n in nodes if "raylet" in n.all_processes}

    def kill_head(self) -> None:
        self.cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
        self.cluster.head_node = None

    def shutdown(self) -> None:
        for node in list(self.cluster.worker_nodes):
            self.cluster.remove_node(node, allow_graceful=False)
        if self.cluster.head_node is not None:
            self.kill_head()


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _node_of(pid: int, raylets: dict[int, Any]) -> Any:
    while pid > 1:
        if pid in raylets:
            return raylets[pid]
        pid = _parent(pid)
    return None


def _processes() -> list[tuple[int, str]]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                out.append((int(proc.name), (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
            except OSError:
                continue
    return out


def fuzzer_nodes(cluster: LocalCluster) -> dict[str, Any]:
    """Each running fuzzer's node: its harness process (named by the raw area in its settings) under a raylet."""
    raylets, found = cluster.raylets(), {}
    for pid, cmdline in _processes():
        if "fuzz.search.harness" not in cmdline:
            continue
        try:
            env = dict(e.split(b"=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in e)
        except OSError:
            continue
        # the worker's raw area names the fuzzer: in its run settings, or (older checkouts) in its own variable
        raw = json.loads(env[b"GDNFUZZ_RUN"])["crashes"] if b"GDNFUZZ_RUN" in env else env.get(b"GDNFUZZ_CRASHES", b"")
        node = _node_of(pid, raylets)
        if node is not None and raw:
            found[Path(os.fsdecode(raw)).name] = node
    return found


def actor_pid(cluster: LocalCluster, class_name: str) -> int | None:
    """The worker process of this cluster that runs an actor of ``class_name``."""
    raylets = cluster.raylets()
    return next((pid for pid, cmdline in _processes()
                 if cmdline.startswith(f"ray::{class_name}") and _node_of(pid, raylets) is not None), None)


# ---------------------------------------------------------------- a campaign


@dataclass
class Run:
    """One ``gdnfuzz campaign`` subprocess and what it left."""

    store: Path
    log: Path
    proc: subprocess.Popen[bytes]
    started: float
    max_time: float
    ended: float | None = None
    code: int | None = None

    @property
    def crashes(self) -> Path:
        return self.store / "crashes"

    @property
    def stats(self) -> Path:
        return self.store / "stats.jsonl"

    def wait(self, limit: float) -> None:
        """Until it exits, or ``limit`` seconds past its --max-time (then its process group is killed)."""
        self.wait_until(self.started + self.max_time + limit)

    def wait_until(self, until: float) -> None:
        try:
            self.code = self.proc.wait(timeout=max(until - time.time(), 1))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.code = None  # killed by the bench: it did not end by itself
        self.ended = time.time()

    @property
    def overran(self) -> float:
        assert self.ended is not None
        return self.ended - self.started - self.max_time

    def tail(self, lines: int = 1) -> list[str]:
        text = self.log.read_text(errors="replace").strip().splitlines()
        return text[-lines:]


def new_store(root: Path) -> Path:
    store = root / "store"
    (store / "corpus").mkdir(parents=True)
    shutil.copytree(REPO / "corpus" / "regressions", store / "corpus" / "regressions")
    return store


def start_campaign(checkout: Path, store: Path, address: str, max_time: float, args: list[str],
                   log_name: str = "campaign.log") -> Run:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "fuzz.cli", "campaign", "--address", address, "--corpus", str(store / "corpus"),
            "--crashes", str(store / "crashes"), "--stats", str(store / "stats.jsonl"),
            "--max-time", f"{max_time:g}", *args]
    log = store.parent / log_name
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return Run(store, log, proc, time.time(), max_time)


# ---------------------------------------------------------------- what is on disk


@dataclass
class Check:
    bundles: int = 0
    problems: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stored: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)


def kept_dirs(log: str) -> list[Path]:
    """The fallback directories a run's output names ("kept in DIR" or "kept in DIR/SIGNATURE")."""
    found = set()
    for m in re.finditer(r"kept in (/\S+)", log):
        path = Path(m.group(1).rstrip(":;,."))
        found.add(path.parent if (path / "verdict.json").exists() else path)
    return sorted(p for p in found if p.is_dir())


def check_store(run: Run) -> Check:
    """Every bundle, stats line and queue file of the run's store; findings seen and not stored anywhere."""
    check = Check()
    kept = kept_dirs(run.log.read_text(errors="replace"))
    for verdict in [*run.crashes.rglob("verdict.json"), *(v for d in kept for v in d.rglob("verdict.json"))]:
        check.bundles += 1
        try:
            load_bundle(verdict.parent)
        except InputError as exc:
            check.problems.append(f"bundle: {exc}")
            continue
        if verdict.parent.parent.name != "raw" and verdict.parent.parent.parent.name != "raw":
            check.stored.add(verdict.parent.name)
        else:
            check.seen.add(verdict.parent.name)
    for directory in (p for p in run.crashes.rglob("*") if p.is_dir() and (p / "scenario.json").exists()):
        if not (directory / "verdict.json").exists():
            check.problems.append(f"bundle without verdict.json: {directory}")
    if run.stats.exists():
        try:
            read_stats(run.stats)
        except InputError as exc:
            check.problems.append(f"stats: {exc}")
    for path in list_inputs(run.store / "corpus" / "queue"):
        if CONTENT_NAME.fullmatch(path.name) and content_name(path.read_bytes()) != path.name:
            check.problems.append(f"torn queue file ({path.stat().st_size} bytes): {path}")
    check.problems += [f"stray temporary file: {p}" for p in run.store.rglob(".*.tmp")]
    for artifact in (a for kind in ("crash", "timeout", "oom") for a in (run.crashes / "raw").glob(f"*-{kind}-*")):
        check.seen.add(f"artifact {artifact.name}")  # an input that killed or hung the harness, never stored
    check.lost = sorted(s for s in check.seen if s not in check.stored)
    return check


def stats_rows(run: Run) -> list[Any]:
    try:
        return read_stats(run.stats)
    except InputError:
        return []


def resumed_after(run: Run, fuzzer: str, since: float) -> float | None:
    """Seconds from ``since`` until ``fuzzer``'s execs grew past what they were then (from the stats file)."""
    rows = sorted((r for r in stats_rows(run) if r.actor == fuzzer), key=lambda r: r.time)
    before = max((r.execs for r in rows if r.time <= since), default=0)
    return next((r.time - since for r in rows if r.time > since and r.execs > before), None)


def store_back_after(run: Run, since: float) -> str:
    """How long after ``since`` the crash store answered again as a new process (its restarts and state in the
    stats file)."""
    rows = sorted((r for r in stats_rows(run) if r.actor == "crash-store"), key=lambda r: r.time)
    if not any(r.state for r in rows):
        return "not recorded (no actor state in this checkout's stats)"
    before = max((r.restarts for r in rows if r.time <= since), default=0)
    return _seconds(next((r.time - since for r in rows if r.time > since and r.restarts > before
                          and r.state == "alive"), None))


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}s"


def report_run(name: str, run: Run, check: Check) -> None:
    ended = "killed by the bench" if run.code is None else f"exit {run.code}"
    print(f"{name}: {ended} after {run.ended - run.started:.0f}s (--max-time {run.max_time:g}: "
          f"{'held' if run.code is not None and run.overran <= 10 else 'NOT held'}, {run.overran:+.0f}s); "
          f"{check.bundles} bundles; findings lost {len(check.lost)}; torn or invalid files {len(check.problems)}",
          flush=True)
    for lost in check.lost:
        print(f"  LOST {lost}")
    for problem in check.problems[:20]:
        print(f"  INVALID {problem}")
    print(f"  last line: {run.tail()[0] if run.tail() else ''}")


# ---------------------------------------------------------------- scenarios


@dataclass
class Fault:
    """One fault of the schedule: what was done, when (seconds since the epoch), and what it touched."""

    what: str
    at: float
    fuzzer: str | None = None  # whose fuzzing must resume
    store: bool = False  # the crash store actor (it must answer again)


def fault_line(run: Run, fault: Fault) -> str:
    at = f"at {fault.at - run.started:.0f}s"
    if fault.fuzzer is not None:
        return f"{fault.what} {at}: {fault.fuzzer} fuzzing again after {_seconds(resumed_after(run, fault.fuzzer, fault.at))}"
    if fault.store:
        return f"{fault.what} {at}: answering again after {store_back_after(run, fault.at)}"
    resumed = ", ".join(f"{f} after {_seconds(resumed_after(run, f, fault.at))}" for f in ("fuzzer-0", "fuzzer-1"))
    return f"{fault.what} {at}: from then, fuzzing resumed: {resumed}"


def scenario_faults(checkout: Path, work: Path, max_time: float) -> None:
    """The scripted schedule on 3 worker nodes, 2 fuzzers."""
    store = new_store(work)
    cluster = LocalCluster(nodes=3)
    run = start_campaign(checkout, store, cluster.address, max_time,
                         ["--fuzzers", "2", "--verifiers", "0", "--minimize-time", "20", "--merge-every", "0"])
    faults: list[Fault] = []
    read_only_now: list[Path] = []  # undone in the end whatever happens

    def at(t: float) -> float:
        time.sleep(max(run.started + t - time.time(), 0))
        return time.time()

    def read_only(t: float, seconds: float) -> None:
        at(t)
        try:
            make_read_only(store)
        except OSError as exc:
            print(f"  store read-only: not possible here ({exc})")
            return
        read_only_now.append(store)
        at(t + seconds)
        make_writable(read_only_now.pop())
        faults.append(Fault(f"store read-only from {t:.0f}s, writable again", time.time()))

    def kill_node_of(t: float, fuzzer: str, graceful: bool, re_add: float | None) -> None:
        start = at(t)
        node = fuzzer_nodes(cluster).get(fuzzer)
        if node is None:
            print(f"  node of {fuzzer} at {t:.0f}s: {fuzzer} was not running (no harness found)")
            return
        cluster.remove(node, graceful=graceful)
        if re_add is not None:
            at(t + re_add)
            cluster.add()
        what = f"removed gracefully, a node added {re_add:.0f}s later" if re_add else "SIGKILLed"
        faults.append(Fault(f"worker node of {fuzzer} {what}", start, fuzzer=fuzzer))

    def kill_store(t: float) -> None:
        start = at(t)
        pid = actor_pid(cluster, "CrashStoreActor")
        if pid is None:
            print(f"  crash store at {t:.0f}s: no process found")
            return
        on = "the head" if _node_of(pid, cluster.raylets()) is cluster.cluster.head_node else "a worker node"
        os.kill(pid, signal.SIGKILL)
        faults.append(Fault(f"crash store actor (on {on}) SIGKILLed", start, store=True))

    schedule = [lambda: read_only(60, 40), lambda: kill_node_of(150, "fuzzer-0", False, None),
                lambda: kill_node_of(220, "fuzzer-1", True, 15), lambda: kill_store(300)]
    try:
        for step in schedule:
            if run.proc.poll() is not None:
                break
            step()
        run.wait(limit=120)
    finally:
        for directory in read_only_now:
            make_writable(directory)
        cluster.shutdown()
    check = check_store(run)
    for fault in faults:
        print(f"  {fault_line(run, fault)}")
    report_run("faults", run, check)


def scenario_capacity(checkout: Path, work: Path, max_time: float) -> None:
    """One node of 2 CPUs, 2 fuzzers, 0 verifiers: every CPU is a fuzzer's."""
    store = new_store(work)
    cluster = LocalCluster(nodes=0, head_cpus=2)
    run = start_campaign(checkout, store, cluster.address, max_time,
                         ["--fuzzers", "2", "--verifiers", "0", "--minimize-time", "20", "--merge-every", "0"])
    try:
        run.wait(limit=300)
    finally:
        cluster.shutdown()
    check = check_store(run)
    minimized = sum(1 for v in run.crashes.glob("*/verdict.json") if json.loads(v.read_text()).get("stages"))
    print(f"  signatures seen {len(check.seen | check.stored)}, bundles stored {len(check.stored)}, minimized "
          f"{minimized}")
    report_run("capacity", run, check)


def scenario_head(checkout: Path, work: Path, max_time: float) -> None:
    """The head killed at 90 s; then --resume on a new cluster for 60 s."""
    store = new_store(work)
    cluster = LocalCluster(nodes=1)
    run = start_campaign(checkout, store, cluster.address, max_time,
                         ["--fuzzers", "1", "--verifiers", "0", "--minimize-time", "20", "--merge-every", "0"])
    try:
        time.sleep(max(run.started + 90 - time.time(), 0))
        killed = time.time()
        cluster.kill_head()
        run.wait_until(killed + 150)
    finally:
        cluster.shutdown()
    check = check_store(run)
    ended = "killed by the bench 150s after the kill" if run.code is None else f"exit {run.code}"
    print(f"  head killed at 90s: the driver ended {run.ended - killed:.0f}s later ({ended}); last line: "
          f"{run.tail()[0] if run.tail() else ''}")
    print(f"  store: {check.bundles} bundles, {len(check.lost)} signatures only raw (not yet stored as bundles), "
          f"torn or invalid files {len(check.problems)}")
    before = max((r.execs for r in stats_rows(run) if r.actor == "fuzzer-0"), default=0)
    cluster = LocalCluster(nodes=1)
    resumed = start_campaign(checkout, store, cluster.address, 60, ["--resume"], "resume.log")
    try:
        resumed.wait(limit=120)
    finally:
        cluster.shutdown()
    after = max((r.execs for r in stats_rows(resumed) if r.actor == "fuzzer-0"), default=0)
    check = check_store(resumed)
    print(f"  --resume for 60s: exit {resumed.code} after {resumed.ended - resumed.started:.0f}s; fuzzer-0 execs "
          f"{before} before, {after} after; {check.bundles} bundles, findings lost {len(check.lost)}, torn or "
          f"invalid files {len(check.problems)}; last line: {resumed.tail()[0] if resumed.tail() else ''}")


def rate(points: list[tuple[float, int]]) -> float:
    """execs/s from the first report with execs to the last (start-up excluded)."""
    points = sorted(p for p in points if p[1] > 0)
    if len(points) < 2 or points[-1][0] == points[0][0]:
        return 0.0
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def scenario_scaling(checkout: Path, work: Path, seconds: float) -> None:
    """Campaigns on 1, 2 and 3 nodes of one CPU, and gdnfuzz run -j1 on the same machine."""
    print(f"{os.cpu_count()} CPUs; load average at start {os.getloadavg()[0]:.1f}; {seconds:g}s each; "
          "vllm against vllm", flush=True)
    store = new_store(work / "run")
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "fuzz.cli", "run", "--candidate", "vllm", "--reference", "vllm", "-j", "1",
            "--max-time", f"{seconds:g}", "--corpus", str(store / "corpus"), "--crashes", str(store / "crashes")]
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True)
    points = [(float(m.group(1)), int(m.group(2))) for m in STATUS_LINE.finditer(done.stderr)]
    print(f"gdnfuzz run -j1 (no Ray): {rate(points):7.1f} exec/s  (load {os.getloadavg()[0]:.1f})", flush=True)
    for nodes in (1, 2, 3):
        store = new_store(work / f"ray{nodes}")
        cluster = LocalCluster(nodes=nodes)
        run = start_campaign(checkout, store, cluster.address, seconds,
                             ["--candidate", "vllm", "--reference", "vllm", "--fuzzers", str(nodes),
                              "--verifiers", "0", "--merge-every", "0"])
        try:
            run.wait(limit=120)
        finally:
            cluster.shutdown()
        totals: dict[float, int] = {}
        for row in stats_rows(run):
            if row.actor.startswith("fuzzer-") and row.state in ("", "alive"):  # not the final rows, after the stop
                totals[row.time] = totals.get(row.time, 0) + row.execs
        print(f"campaign, {nodes} node(s) x 1 CPU, {nodes} fuzzer(s): {rate(list(totals.items())):7.1f} exec/s "
              f"aggregate  (load {os.getloadavg()[0]:.1f})", flush=True)


SCENARIOS = {"faults": scenario_faults, "capacity": scenario_capacity, "head": scenario_head,
             "scaling": scenario_scaling}
TIMES = {"faults": 360.0, "capacity": 150.0, "head": 300.0, "scaling": 90.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", default=str(REPO), help="the gdnfuzz checkout the campaigns run (default this)")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="scenarios, comma-separated")
    parser.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    args = parser.parse_args()
    checkout = Path(args.checkout).resolve()
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gdnfuzz-faults-"))
    print(f"checkout {checkout}; Ray on 127.0.0.1; work directory {work}", flush=True)
    for name in args.only.split(","):
        print(f"== {name}", flush=True)
        SCENARIOS[name](checkout, work / name, TIMES[name])
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)


if __name__ == "__main__":
    main()
