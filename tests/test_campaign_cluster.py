"""A campaign on a real two-node Ray cluster on 127.0.0.1 (ray.cluster_utils.Cluster): every CPU held by a
fuzzer, a worker node SIGKILLed, a node added, the end called early.

Driven by conditions, not a clock: the campaign runs until both fuzzers fuzz and a finding is minimized
(minimisation asks for no CPU, so fuzzers holding both CPUs do not starve it); then fuzzer-0's node is
SIGKILLed: the driver must show fuzzer-0 not alive with no rate and the cluster one node and one CPU short;
a node is added and fuzzer-0 must fuzz again there (a new process, a restart counted); then the campaign
is ended early and must end within seconds, every finding seen stored, minimized or as found.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from test_campaign import poll_until  # noqa: E402

from fuzz.errors import ExitCode  # noqa: E402
from fuzz.oracle.verdict import exit_code_for  # noqa: E402
from fuzz.search.settings import RunSettings  # noqa: E402
from fuzz.store.bundle import load_bundle  # noqa: E402
from fuzz.store.stats import CLUSTER, read_stats  # noqa: E402
from workers.campaign.config import CampaignConfig  # noqa: E402
from workers.campaign.driver import Campaign, DriverSettings  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "corpus" / "regressions" / "pr51113-fragmented-first-chunk-single.json"
STARTUP_LIMIT = 600  # seconds: two harnesses import vLLM under instrumentation on a loaded 2-core machine
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 ** 2}


def _node_of(pid: int, nodes: list[Any]) -> Any:
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in nodes}
    while pid > 1 and pid not in raylets:
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return raylets.get(pid)


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    root = tmp_path_factory.mktemp("cluster")
    (root / "corpus" / "regressions").mkdir(parents=True)
    (root / "corpus" / "regressions" / SEED.name).write_bytes(SEED.read_bytes())
    ray_tmp = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # Ray's own files, not the machine's /tmp/ray
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_TMPDIR", ray_tmp)
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                                 "object_store_memory": NODE["object_store_memory"]})
        workers = [cluster.add_node(**NODE), cluster.add_node(**NODE)]
        config = CampaignConfig(RunSettings(corpus=root / "corpus", crashes=root / "crashes",
                                            max_time=3 * STARTUP_LIMIT, minimize_seconds=10),
                                fuzzers=2, verifiers=0, merge_every=0, drain_time=3)
        campaign = Campaign(config, DriverSettings(address=cluster.address, stats=root / "stats.jsonl",
                                                   dashboard=root / "dashboard.html", stats_every=2))
        try:
            campaign.start()
            minimized = poll_until(campaign, lambda s: len(s["fuzzers"]) == 2 and all(
                f["execs"] > 0 for f in s["fuzzers"].values()) and s["crash_store"].get("signatures", 0) >= 1,
                STARTUP_LIMIT)
            store_on_head = _node_of(minimized["crash_store"]["pid"], [cluster.head_node, *workers]) \
                is cluster.head_node
            old_pid = minimized["fuzzers"]["fuzzer-0"]["pid"]
            victim = _node_of(old_pid, workers)
            cluster.remove_node(victim, allow_graceful=False)
            lost = poll_until(campaign, lambda s: campaign.fuzzer_watch.views["fuzzer-0"].state != "alive"
                               and campaign._capacity.nodes_lost == 1, 120)
            lost_view = campaign.fuzzer_watch.views["fuzzer-0"]
            lost_state = (lost_view.state, lost_view.exec_per_s, campaign._capacity, campaign.progress_line())
            cluster.add_node(**NODE)
            again = poll_until(campaign, lambda s: s["fuzzers"]["fuzzer-0"]["pid"] != old_pid
                                and s["fuzzers"]["fuzzer-0"]["execs"] > 0, STARTUP_LIMIT)
            campaign.deadline = time.time()  # --max-time is up now
            ending = time.time()
            summary = campaign.finish()
            ended_in = time.time() - ending
        finally:
            if ray.is_initialized():
                ray.shutdown()
            for node in list(cluster.worker_nodes):
                cluster.remove_node(node, allow_graceful=False)
            cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
    return {"config": config, "root": root, "minimized": minimized, "store_on_head": store_on_head, "lost": lost, "lost_state": lost_state,
            "again": again, "summary": summary, "ended_in": ended_in, "old_pid": old_pid,
            "restarts": campaign.fuzzer_watch.views["fuzzer-0"].restarts}


@pytest.mark.slow
def test_minimisation_runs_while_the_fuzzers_hold_every_cpu(cluster_run: dict[str, Any]) -> None:
    crashes: Path = cluster_run["config"].crashes
    minimized = [b for b in crashes.glob("*/verdict.json") if load_bundle(b.parent).verdict.get("stages")]
    assert minimized, "no finding was minimized while both CPUs were held by fuzzers"
    assert cluster_run["store_on_head"]  # the crash store never runs on a worker node that can be lost
    assert exit_code_for(cluster_run["summary"].signatures) == ExitCode.DIVERGED


@pytest.mark.slow
def test_a_lost_node_shows_its_fuzzer_down_and_the_capacity_lost(cluster_run: dict[str, Any]) -> None:
    state, rate, capacity, line = cluster_run["lost_state"]
    assert state in ("restarting", "unreachable") and rate == 0.0
    assert (capacity.nodes_lost, capacity.cpus_lost) == (1, 1.0)
    assert "fuzzer-0" in line.split(" down ")[1] and "nodes 2/3" in line
    rows = read_stats(cluster_run["root"] / "stats.jsonl")
    assert any(r.actor == "fuzzer-0" and r.state in ("restarting", "unreachable") and r.exec_per_s == 0 for r in rows)
    assert any(r.actor == CLUSTER and r.nodes_lost == 1 and r.cpus_lost == 1.0 for r in rows)


@pytest.mark.slow
def test_the_fuzzer_is_restarted_on_the_added_node(cluster_run: dict[str, Any]) -> None:
    assert cluster_run["again"]["fuzzers"]["fuzzer-0"]["pid"] != cluster_run["old_pid"]
    assert cluster_run["restarts"] >= 1
    assert cluster_run["summary"].restarts["fuzzer-0"] >= 1


@pytest.mark.slow
def test_the_end_holds_within_seconds_and_stores_every_finding(cluster_run: dict[str, Any]) -> None:
    assert cluster_run["ended_in"] < 40  # drain 3 s, the fuzzers' stop and the crash store's end, bounded
    crashes: Path = cluster_run["config"].crashes
    signatures = cluster_run["summary"].signatures
    assert signatures and all((crashes / sig / "verdict.json").is_file() for sig in signatures)
    raw = {p.parent.name for p in crashes.glob("raw/*/*/verdict.json")}
    assert raw <= set(signatures)
    for bundle in crashes.glob("*/verdict.json"):
        load_bundle(bundle.parent)
    assert not list(crashes.rglob(".*.tmp"))
    rows = read_stats(cluster_run["root"] / "stats.jsonl")
    assert [r.state for r in rows if r.actor == "campaign"][-1] == "ended"
