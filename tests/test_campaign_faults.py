"""A campaign that survives its cluster and its store, in parts that need no Ray cluster.

The crash store's state rebuilt from the shared store, findings the store refuses kept (in memory, then a
fallback directory) with no partial bundle, the exit code over every signature seen, a stats line the disk
cuts short taken back, torn queue files, the liveness views, the resume record and ``--resume``'s
one-line refusals. Read-only stores are real (``storage_faults``: a read-only bind mount as root).
"""

from __future__ import annotations

import hashlib
import json
import resource
import signal
import time
from pathlib import Path

import pytest
from storage_faults import read_only

from fuzz.cli import main
from fuzz.errors import ExitCode
from fuzz.oracle.verdict import exit_code_for
from fuzz.report.finding_report import store_finding
from fuzz.search.artifacts import crash_finding
from fuzz.search.settings import RunSettings
from fuzz.store.bundle import load_bundle
from fuzz.store.corpus_merge import remove_torn_inputs
from fuzz.store.stats import CAMPAIGN, CLUSTER, StatsRow, StatsWriter, read_stats
from fuzz.store.writable import store_fault
from workers.campaign.config import CampaignConfig
from workers.campaign.crash_store import CrashStoreActor
from workers.campaign.driver import Campaign, DriverSettings
from workers.campaign.liveness import ActorView, ActorWatch, ClusterWatch, head_reachable
from workers.campaign.loopback import is_loopback
from workers.campaign.resume import CampaignRecord, carried_execs, fuzzed_seconds, read_record, write_record

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "corpus" / "regressions" / "pr51113-fragmented-first-chunk-single.json"
T0 = 1_700_000_000.0


def _config(tmp_path: Path, **changes) -> CampaignConfig:
    return CampaignConfig(RunSettings(corpus=tmp_path / "corpus", crashes=tmp_path / "crashes"), **changes)


def _raw(config: CampaignConfig, actor: str, kind: str = "hang") -> str:
    """A raw bundle as a fuzzer's harness saves it; its signature."""
    finding = crash_finding(kind, SEED.read_bytes(), "", "pre-51113", "vllm")
    store_finding(finding, config.raw / actor, None)
    return finding.signature


def _partial_files(root: Path) -> list[Path]:
    """Stray temporary files, and directories that look like bundles without their verdict.json."""
    strays = list(root.rglob(".*.tmp"))
    bundles = [p for p in root.rglob("*") if p.is_dir() and (p / "scenario.json").exists()
               and not (p / "verdict.json").exists()]
    return strays + bundles


def test_a_new_crash_store_requeues_every_raw_finding_not_yet_minimized(tmp_path: Path) -> None:
    config = _config(tmp_path)
    stored = _raw(config, "fuzzer-0", "hang")
    raw_only = _raw(config, "fuzzer-1", "worker-crash")
    store_finding(crash_finding("hang", SEED.read_bytes(), "", "pre-51113", "vllm"), config.crashes, None)

    store = CrashStoreActor(config, time.time(), time.time() + 300)  # as Ray restarts it, on any node

    assert list(store.s.pending) == [raw_only]  # the minimisation queue, rebuilt from the shared store
    assert set(store.s.seen) == {stored, raw_only} and store.s.known == {stored}


def test_the_end_stores_every_finding_seen_minimized_or_not(tmp_path: Path) -> None:
    config = _config(tmp_path, drain_time=0.0)
    sig = _raw(config, "fuzzer-0")
    store = CrashStoreActor(config, time.time(), time.time())  # no time left to minimize

    final = store.finish(str(tmp_path / "fallback"))

    assert final["seen"] == [sig] and final["unsaved"] == [] and final["kept"] is None
    assert load_bundle(config.crashes / sig).verdict["signature"] == sig
    assert any("stored as found" in what for _, s, what in final["events"] if s == sig)


def test_a_finding_the_store_refuses_is_kept_then_written_and_never_half_written(tmp_path: Path) -> None:
    config = _config(tmp_path, drain_time=0.0)
    config.raw.mkdir(parents=True)
    store = CrashStoreActor(config, time.time(), time.time())
    artifact = config.raw / "fuzzer-0-crash-aaaa"
    artifact.write_bytes(SEED.read_bytes())
    log = "Traceback (most recent call last):\nZeroDivisionError: division by zero\n"
    with read_only(config.crashes):
        sig = store.report_artifact("fuzzer-0", str(artifact), "worker-crash", log)
        assert sig in store.s.unsaved and store.s.storage is not None
        path, number, _ = store.s.storage
        assert number in (30, 13) and path.startswith(str(config.crashes))  # EROFS as root, EACCES otherwise
        final = store.finish(str(tmp_path / "fallback"))
    assert final["kept"] == str(tmp_path / "fallback") and final["lost"] == []
    assert load_bundle(tmp_path / "fallback" / sig).verdict["kind"] == "worker-crash"
    assert not (config.crashes / sig).exists() and _partial_files(tmp_path) == []
    assert artifact.exists()  # still where the fuzzer left it

    store.tick()  # the store takes writes again: the finding in memory goes where it belongs

    assert load_bundle(config.crashes / sig).verdict["signature"] == sig and not store.s.unsaved
    assert not artifact.exists() and (config.raw / "reported" / artifact.name).is_file()
    assert _partial_files(tmp_path) == []


def test_a_bundle_whose_writing_fails_leaves_no_directory(tmp_path: Path) -> None:
    crashes, regressions = tmp_path / "crashes", tmp_path / "regressions"
    regressions.mkdir()
    finding = crash_finding("hang", SEED.read_bytes(), "", "pre-51113", "vllm")
    with read_only(regressions), pytest.raises(OSError):
        store_finding(finding, crashes, regressions)  # the bundle's files are written, then the regression fails
    assert not (crashes / finding.signature).exists() and _partial_files(tmp_path) == []


def test_store_fault_names_what_a_write_would_meet(tmp_path: Path) -> None:
    assert store_fault(tmp_path) is None
    assert store_fault(tmp_path / "absent").errno == 2
    with read_only(tmp_path):
        fault = store_fault(tmp_path)
    assert fault is not None and fault.errno in (30, 13) and fault.filename == str(tmp_path)


def test_a_stats_line_the_disk_cuts_short_is_taken_back(tmp_path: Path) -> None:
    path = tmp_path / "stats.jsonl"
    writer = StatsWriter(path)
    writer.write(StatsRow(T0, "fuzzer-0", execs=1))
    size = path.stat().st_size
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 20, hard))  # the next line fits only in part
    try:
        with pytest.raises(OSError):
            writer.write(StatsRow(T0 + 1, "fuzzer-0", execs=2))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert path.stat().st_size == size
    writer.write(StatsRow(T0 + 2, "fuzzer-0", execs=3))
    writer.close()
    assert [r.execs for r in read_stats(path)] == [1, 3]


def test_torn_queue_files_are_removed_and_nothing_else(tmp_path: Path) -> None:
    good = b"an input"
    (tmp_path / hashlib.sha1(good).hexdigest()).write_bytes(good)
    zero = tmp_path / hashlib.sha1(b"lost to a full disk").hexdigest()
    zero.write_bytes(b"")
    cut = tmp_path / hashlib.sha1(b"cut short here").hexdigest()
    cut.write_bytes(b"cut short")
    (tmp_path / "hand-named.json").write_bytes(b"")
    assert sorted(remove_torn_inputs(tmp_path)) == sorted([zero, cut])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([hashlib.sha1(good).hexdigest(), "hand-named.json"])


def test_the_exit_code_counts_raw_findings_and_never_known_ones(tmp_path: Path) -> None:
    config = _config(tmp_path)
    campaign = Campaign(config, DriverSettings(stats=tmp_path / "stats.jsonl"))
    assert campaign._summary({"states": {}, "seen": []}).signatures == {}
    known = "reference-side-poison-unaligned-end-eagle-family-internal-checkpoint"
    summary = campaign._summary({"states": {}, "seen": [known]})
    assert exit_code_for(summary.signatures) == ExitCode.CLEAN  # the reference shares it: known, by design
    raw = _raw(config, "fuzzer-0")  # found, never minimized, never reported to any crash store
    summary = campaign._summary({"states": {known: None}, "seen": []})
    assert set(summary.signatures) == {known, raw} and exit_code_for(summary.signatures) == ExitCode.DIVERGED


def test_an_actor_view_keeps_counts_across_incarnations_and_shows_no_stale_rate() -> None:
    watch = ActorWatch(["fuzzer-0"], {"fuzzer-0": 1000})
    view = watch.views["fuzzer-0"]
    ActorWatch.answer(view, {"pid": 1, "execs": 50, "exec_per_s": 9, "restarts": 1})
    assert (view.execs, view.exec_per_s, view.restarts) == (1050, 9.0, 1)
    view.state = "unreachable"
    assert view.exec_per_s == 0.0 and view.execs == 1050
    ActorWatch.answer(view, {"pid": 2, "execs": 5, "exec_per_s": 3, "restarts": 0})  # Ray restarted it elsewhere
    assert (view.execs, view.restarts, view.state) == (1055, 2, "alive")
    assert ActorView("x").state == "starting"


def test_the_cluster_watch_counts_lost_nodes_and_cpus() -> None:
    cluster = ClusterWatch()
    nodes = [{"NodeID": n, "Alive": True, "Resources": {"CPU": 1.0}} for n in "abc"]
    assert cluster.capacity(nodes).nodes == 3
    nodes[1]["Alive"] = False
    lost = cluster.capacity(nodes)
    assert (lost.nodes, lost.nodes_lost, lost.cpus, lost.cpus_lost) == (2, 1, 2.0, 1.0)
    added = cluster.capacity([*nodes, {"NodeID": "d", "Alive": True, "Resources": {"CPU": 1.0}}])
    assert (added.nodes, added.nodes_lost) == (3, 1)
    assert not head_reachable("127.0.0.1:1")


def test_loopback_addresses() -> None:
    assert all(map(is_loopback, ["local", "127.0.0.1:6379", "localhost:6379", "ray://127.0.0.1:10001", "[::1]:6379"]))
    assert not any(map(is_loopback, ["auto", "10.0.0.2:6379", "head.example:6379"]))


def test_the_resume_record_and_the_time_a_campaign_has_fuzzed(tmp_path: Path) -> None:
    record = CampaignRecord({"max_time": 300.0, "fuzzers": 2}, (T0,)).with_run(T0 + 1000)
    write_record(tmp_path, record)
    assert read_record(tmp_path) == record
    rows = [StatsRow(T0 + 5, "fuzzer-0", execs=10), StatsRow(T0 + 100, "fuzzer-0", execs=99),
            StatsRow(T0 + 100, CAMPAIGN, state="running"), StatsRow(T0 + 100, CLUSTER, nodes=2),
            StatsRow(T0 + 1040, "fuzzer-1", execs=7)]
    assert fuzzed_seconds(record, rows) == 140.0  # the gap between the lost head and the resume is not counted
    assert carried_execs(rows) == {"fuzzer-0": 99, "fuzzer-1": 7}


def test_resume_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crashes = tmp_path / "crashes"
    assert main(["campaign", "--resume", "--crashes", str(crashes)]) == 2
    write_record(crashes, CampaignRecord({"max_time": 60.0, "stats": str(tmp_path / "stats.jsonl"),
                                          "fail_on": "correctness"}, (T0,)))
    assert main(["campaign", "--resume", "--crashes", str(crashes), "--fuzzers", "3"]) == 2
    (tmp_path / "stats.jsonl").write_text(StatsRow(T0 + 61, CAMPAIGN, state="ended").to_line())
    assert main(["campaign", "--resume", "--crashes", str(crashes)]) == 2
    (crashes / "campaign.json").write_text(json.dumps({"arguments": {}, "runs": []}))
    assert main(["campaign", "--resume", "--crashes", str(crashes)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4, err
    assert "campaign.json: <file>: no campaign to resume here" in err[0]
    assert err[1].startswith("gdnfuzz campaign: --fuzzers: --resume continues the campaign with the settings in")
    assert "has run its 60s; give --max-time S" in err[2]
    assert "campaign.json: runs: expected a non-empty list" in err[3]


def test_resume_reads_an_older_records_profile_by_todays_name_and_refuses_an_unknown_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fuzz.cli import build_parser
    from fuzz.cli.campaign import _resumed

    crashes = tmp_path / "crashes"
    arguments = {"max_time": 60.0, "stats": str(tmp_path / "stats.jsonl"), "fail_on": "correctness"}
    write_record(crashes, CampaignRecord({**arguments, "profile": "default"}, (T0,)))  # before the mixture
    args, _, _ = _resumed(build_parser().parse_args(["campaign", "--resume", "--crashes", str(crashes)]))
    assert args.profile == "prefill"
    write_record(crashes, CampaignRecord({**arguments, "profile": "nope"}, (T0,)))
    assert main(["campaign", "--resume", "--crashes", str(crashes)]) == 2
    assert "campaign.json: arguments.profile: 'nope' is not a workload profile" in capsys.readouterr().err
