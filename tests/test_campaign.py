"""The Ray campaign on this machine: real Ray, real atheris harness subprocesses, tmp corpus and crash store.

One campaign (two fuzzers, candidate pre-51113, one PR #51113 regression as the
seed) is driven by conditions, not by a clock: it runs until fuzzer-0 has added
corpus entries and the crash store has saved the seed bug's minimized bundle,
then fuzzer-0's actor is killed (Ray restarts it), and the campaign finishes
once the new incarnation answers. The tests then check what is on disk.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from fuzz.search.settings import RunSettings  # noqa: E402
from fuzz.store.corpus_merge import list_inputs  # noqa: E402
from workers.campaign.config import CampaignConfig  # noqa: E402
from workers.campaign.driver import Campaign, DriverSettings  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "corpus" / "regressions" / "pr51113-fragmented-first-chunk-single.json"
STARTUP_LIMIT = 600  # seconds: the harness imports vLLM under instrumentation (slow on a loaded 2-core machine)


def poll_until(campaign: Campaign, done: Any, limit: float) -> dict[str, Any]:
    """The campaign's stats once ``done(stats)`` holds, polled every 2 s for at most ``limit`` seconds."""
    end = time.time() + limit
    while time.time() < end:
        stats = campaign.poll()
        if done(stats):
            return stats
        time.sleep(2)
    raise AssertionError(f"condition not reached in {limit}s; last stats: {campaign.progress_line()}")


def _findings(crashes: Path) -> dict[str, int]:
    """Every bundle on disk (deduplicated and raw) with its hit count."""
    bundles = [*crashes.glob("*/verdict.json"), *crashes.glob("raw/*/*/verdict.json")]
    return {str(p.parent.relative_to(crashes)): json.loads(p.read_text())["hits"] for p in bundles}


@pytest.fixture(scope="module")
def campaign_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("campaign")
    (root / "corpus" / "regressions").mkdir(parents=True)
    shutil.copy(SEED, root / "corpus" / "regressions")
    config = CampaignConfig(RunSettings(corpus=root / "corpus", crashes=root / "crashes", max_time=3 * STARTUP_LIMIT,
                                        minimize_seconds=10),
                            fuzzers=2, verifiers=0, merge_every=0, drain_time=120)
    campaign = Campaign(config, DriverSettings(stats=root / "stats.jsonl", dashboard=root / "dashboard.html",
                                               stats_every=2))
    campaign.start()
    try:
        workdir = config.queue / "fuzzer-0"
        ready = poll_until(campaign, lambda s: s["fuzzers"].get("fuzzer-0", {}).get("execs", 0) > 0
                            and list_inputs(workdir) and s["crash_store"].get("signatures", 0) >= 1, STARTUP_LIMIT)
        before = {"corpus": set(map(str, list_inputs(workdir))), "findings": _findings(config.crashes)}
        old_pid = ready["fuzzers"]["fuzzer-0"]["pid"]
        ray.kill(campaign.fuzzers["fuzzer-0"], no_restart=False)
        restarted = poll_until(campaign, lambda s: s["fuzzers"]["fuzzer-0"]["pid"] != old_pid, 180)
    finally:
        summary = campaign.finish()
    # only fuzzer-0's entries: a running libFuzzer (fuzzer-1) may replace its own new inputs by smaller ones
    after = {"corpus": set(map(str, list_inputs(config.queue / "fuzzer-0"))), "findings": _findings(config.crashes)}
    return {"config": config, "before": before, "after": after, "summary": summary, "old_pid": old_pid,
            "restarted": restarted, "root": root}


@pytest.mark.slow
def test_campaign_finds_minimizes_and_stores_the_seed_bug_once(campaign_run: dict[str, Any]) -> None:
    crashes: Path = campaign_run["config"].crashes
    bundles = sorted(p.parent for p in crashes.glob("*/verdict.json"))
    assert bundles, "no crash directory"
    signatures = campaign_run["summary"].signatures
    assert {b.name for b in bundles} == set(signatures)  # one directory per signature
    verdicts = {b: json.loads((b / "verdict.json").read_text()) for b in bundles}
    seed_bug = next(b for b, v in verdicts.items() if v["kind"] == "poisoned-slot")  # named by its split decision
    verdict = verdicts[seed_bug]
    assert verdict["candidate"] == "pre-51113"
    assert verdict["stages"], "the crash store did not minimize it"
    assert verdict["sizes"]["minimized"]["requests"] <= verdict["sizes"]["original"]["requests"]
    assert (campaign_run["config"].regressions / f"{seed_bug.name}.json").is_file()
    assert verdict["hits"] >= 1
    assert (campaign_run["root"] / "dashboard.html").read_text().count(seed_bug.name) >= 1
    actors = {json.loads(line)["actor"] for line in (campaign_run["root"] / "stats.jsonl").read_text().splitlines()}
    assert {"fuzzer-0", "fuzzer-1", "crash-store"} <= actors


@pytest.mark.slow
def test_killed_fuzzer_is_restarted_and_nothing_is_lost(campaign_run: dict[str, Any]) -> None:
    assert campaign_run["restarted"]["fuzzers"]["fuzzer-0"]["pid"] != campaign_run["old_pid"]
    assert campaign_run["summary"].restarts["fuzzer-0"] >= 1
    before, after = campaign_run["before"], campaign_run["after"]
    assert before["corpus"] and before["corpus"] <= after["corpus"]
    for bundle, hits in before["findings"].items():
        assert after["findings"].get(bundle, 0) >= hits, bundle


@pytest.mark.slow
def test_corpus_merge_keeps_one_copy_of_each_needed_input_and_shares_it(tmp_path: Path) -> None:
    from fuzz.store.corpus_merge import content_name, merge_corpus

    queue = tmp_path / "corpus" / "queue"
    for d in ("fuzzer-0", "fuzzer-1"):
        (queue / d).mkdir(parents=True)
    (tmp_path / "corpus" / "seeds").mkdir()
    regressions = REPO / "corpus" / "regressions"
    same = (regressions / "pr51113-resume-at-331-partial.json").read_bytes()
    other = (regressions / "pr51113-resume-at-331-nopartial.json").read_bytes()
    (queue / "fuzzer-0" / "a").write_bytes(same)
    (queue / "fuzzer-1" / "b").write_bytes(same)
    (queue / "fuzzer-1" / "c").write_bytes(other)
    shutil.copy(regressions / "pr51113-concurrent-prefills.json", tmp_path / "corpus" / "seeds")
    config = CampaignConfig(RunSettings(corpus=tmp_path / "corpus", crashes=tmp_path / "crashes"))

    report = merge_corpus(queue, config.read_only_dirs(), config.harness_env(config.raw / "merge"))

    shared = {p.name for p in queue.iterdir() if p.is_file()}
    assert report.candidates == 3 and report.features > 0
    assert shared <= {content_name(same), content_name(other)} and len(shared) == report.kept >= 1
    assert not (queue / "fuzzer-0" / "a").exists() and not (queue / "fuzzer-1" / "c").exists()
    if content_name(other) in shared:  # fuzzer-1 found it, so fuzzer-0 is handed a copy to reload
        assert (queue / "fuzzer-0" / content_name(other)).read_bytes() == other
    assert not (queue / "fuzzer-1" / content_name(same)).exists()  # both had it: nobody is sent it


def test_bad_arguments_are_one_line_errors_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    from fuzz.cli import main

    assert main(["campaign", "--fuzzers", "0"]) == 2
    assert main(["campaign", "--dry-run-issues"]) == 2
    assert main(["campaign", "--candidate", "no/such/file.py:split"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("gdnfuzz campaign: --") for line in err)


def test_cpu_share_fits_every_actor_and_one_task_on_the_machine() -> None:
    from workers.campaign.driver import cpu_share

    config = CampaignConfig(RunSettings(corpus=Path("c"), crashes=Path("x")), fuzzers=2, verifiers=1)
    share = cpu_share(2.0, config, gpus=0)
    assert 0 < share < 1 and share * 4 <= 2.0
    assert cpu_share(2.0, config, gpus=1) * 3 <= 2.0
    assert cpu_share(64.0, config, gpus=0) == 1.0


def test_kernel_tier_verification_runs_on_the_configured_backend() -> None:
    from workers.campaign.verifier import verification_executor
    from workers.kernels.backends import BackendUnavailable

    run = RunSettings(corpus=Path("c"), crashes=Path("x"))
    assert verification_executor(CampaignConfig(run)) is None  # the engine tier's own executor
    executor = verification_executor(CampaignConfig(run, verify_tier="kernels", kernel_backend="torch"))
    assert executor.tier == "kernels" and executor.backend.name == "torch"
    with pytest.raises(BackendUnavailable, match="unknown kernel backend"):
        verification_executor(CampaignConfig(run, verify_tier="kernels", kernel_backend="cuda-magic"))


def _store(tmp_path: Path, verifiers: int = 1) -> Any:
    from workers.campaign.crash_store import CrashStoreActor

    config = CampaignConfig(RunSettings(corpus=tmp_path / "corpus", crashes=tmp_path / "crashes"), verifiers=verifiers)
    return config, CrashStoreActor(config, time.time(), time.time() + 300)


def test_an_input_that_kills_the_harness_becomes_one_worker_crash_bundle(tmp_path: Path) -> None:
    from fuzz.store.bundle import load_bundle

    config, store = _store(tmp_path)
    log = "=== Uncaught Python exception: ===\nTraceback (most recent call last):\nZeroDivisionError: division by zero\n"
    sigs = []
    for name in ("fuzzer-0-crash-aaaa", "fuzzer-1-crash-bbbb"):
        artifact = config.raw / name
        shutil.copy(SEED, artifact)
        sigs.append(store.report_artifact(name[:8], str(artifact), "worker-crash", log))
        assert not artifact.exists() and (config.raw / "reported" / name).is_file()
    assert sigs[0] == sigs[1] and sigs[0].startswith("worker-crash-zerodivisionerror-")
    bundle = load_bundle(config.crashes / sigs[0])
    assert bundle.verdict["kind"] == "worker-crash" and bundle.verdict["hits"] == 2
    assert not store.s.queue  # the engine confirm does not apply to a harness crash


def test_the_input_a_harness_died_on_without_a_word_becomes_one_artifact(tmp_path: Path) -> None:
    from fuzz.model.deadline import STUCK_EXIT
    from fuzz.search.in_flight import InFlight
    from workers.campaign.fuzzer import keep_died_on

    raw = tmp_path / "raw"
    data = SEED.read_bytes()
    InFlight(raw / "fuzzer-0").start(data)  # the harness died here: os._exit(0), or a run ignoring its deadline
    InFlight(raw / "fuzzer-1")  # died between inputs
    stuck = keep_died_on(raw, "fuzzer-0", STUCK_EXIT)
    assert stuck is not None and stuck.name.startswith("fuzzer-0-timeout-") and stuck.read_bytes() == data
    assert keep_died_on(raw, "fuzzer-0", 0) is None  # libFuzzer's (or an earlier) artifact of it is there
    assert keep_died_on(raw, "fuzzer-1", 0) is None
    stuck.unlink()
    assert keep_died_on(raw, "fuzzer-0", 0).name.startswith("fuzzer-0-crash-")


def test_a_verifier_that_dies_twice_on_a_bundle_leaves_it_inconclusive(tmp_path: Path) -> None:
    from fuzz.report.finding_report import store_finding
    from fuzz.search.artifacts import crash_finding

    config, store = _store(tmp_path)
    finding = crash_finding("hang", SEED.read_bytes(), "", "pre-51113", "vllm")
    store_finding(finding, config.crashes, None)
    store.s.known.add(finding.signature)
    store.s.queue.append(finding.signature)
    assert store.next_verification("verifier-0") == str(config.crashes / finding.signature)
    assert store.next_verification("verifier-0") == str(config.crashes / finding.signature)  # died once: retried
    assert store.next_verification("verifier-0") is None  # died twice: given up, recorded
    verdict = json.loads((config.crashes / finding.signature / "verdict.json").read_text())
    assert verdict["confirmed"] == "inconclusive" and "died 2 times" in verdict["confirmation"]["error"]
    assert store.idle()


def test_a_new_crash_store_resumes_verification_and_filing_from_disk(tmp_path: Path) -> None:
    from dataclasses import replace

    from fuzz.report.finding_report import store_finding
    from fuzz.search.artifacts import crash_finding
    from fuzz.store.bundle import update_verdict
    from workers.campaign.crash_store import CrashStoreActor

    config, _ = _store(tmp_path)
    config = replace(config, file_issues="owner/name", dry_run_issues=True)
    pending, confirmed = (crash_finding(kind, SEED.read_bytes(), "", "pre-51113", "vllm") for kind in ("hang", "worker-crash"))
    for finding, state in ((pending, None), (confirmed, "confirmed")):
        store_finding(finding, config.crashes, None)
        update_verdict(config.crashes / finding.signature, kind="poisoned-slot", confirmed=state)

    store = CrashStoreActor(config, time.time(), time.time() + 300)

    assert list(store.s.queue) == [pending.signature]
    assert (config.crashes / confirmed.signature / "issue.md").read_text().startswith("# ")
    assert not (config.crashes / pending.signature / "issue.md").exists()
