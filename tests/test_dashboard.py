"""Stats file, `gdnfuzz status` and `gdnfuzz dashboard`, from a synthetic stats file and crash store."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from bundle_fixtures import write_bundle

from fuzz import package_version
from fuzz.cli import main
from fuzz.oracle.finding import environment
from fuzz.report.dashboard import MAX_POINTS, nice_ticks, render_dashboard, scan_crashes, time_ticks
from fuzz.report.status_table import format_table
from fuzz.store.stats import (
    CAMPAIGN,
    CLUSTER,
    TOTAL,
    StatsError,
    StatsReader,
    StatsRow,
    StatsWriter,
    latest_by_actor,
    read_stats,
    totals,
)
from workers.campaign.resume import CampaignRecord, run_versions, write_record

T0 = 1_700_000_000.0


def _campaign(path: Path, steps: int = 20) -> None:
    with StatsWriter(path) as writer:
        for i in range(steps):
            for k in range(2):
                writer.write(
                    StatsRow(
                        T0 + 10 * i + k,
                        f"fuzzer-{k}",
                        execs=100 * i,
                        exec_per_s=10.0 + k,
                        coverage=50 + i,
                        corpus_size=5 + i // 4,
                        findings=i // 5 if k == 0 else 0,
                    )
                )
            writer.write(StatsRow(T0 + 10 * i + 2, "verifier-0", verifier_queue=i % 3))


def _cli(argv: list[str]) -> int:
    return main(argv)


def test_reader_skips_a_torn_last_line_until_it_is_complete(tmp_path):
    path = tmp_path / "stats.jsonl"
    _campaign(path, steps=3)
    line = StatsRow(T0 + 99, "fuzzer-0", execs=7).to_line()
    with open(path, "a") as f:
        f.write(line[:10])
    reader = StatsReader(path)
    assert len(reader.poll()) == 9
    with open(path, "a") as f:
        f.write(line[10:])
    assert reader.poll() == [StatsRow(T0 + 99, "fuzzer-0", execs=7)]
    assert reader.poll() == []


def test_corrupt_lines_name_file_line_and_field(tmp_path):
    path = tmp_path / "stats.jsonl"
    path.write_text('{"time": 1, "actor": "a"}\n{"time": 2, "actor": "a", "execs": "many"}\n')
    with pytest.raises(StatsError, match=r"stats\.jsonl:2: execs: expected int"):
        read_stats(path)
    path.write_text('{"time": 1, "actor": "a"}\nnot json\n{"time": 3, "actor": "a"}\n')
    with pytest.raises(StatsError, match=r"stats\.jsonl:2: not valid JSON"):
        read_stats(path)
    with pytest.raises(StatsError, match="no such file"):
        read_stats(tmp_path / "absent.jsonl")


def test_totals_sum_counters_and_take_the_max_of_shared_gauges(tmp_path):
    path = tmp_path / "stats.jsonl"
    _campaign(path)
    latest = latest_by_actor(read_stats(path))
    assert sorted(latest) == ["fuzzer-0", "fuzzer-1", "verifier-0"]
    total = totals(latest.values())
    assert (total.execs, total.exec_per_s, total.findings) == (3800, 21.0, 3)
    assert (total.coverage, total.corpus_size, total.verifier_queue) == (69, 9, 19 % 3)


def test_status_prints_one_row_per_actor_and_totals(tmp_path, capsys):
    path = tmp_path / "stats.jsonl"
    _campaign(path)
    assert _cli(["status", "--stats", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["actor", "age", "execs", "exec/s", "coverage", "corpus", "findings", "queue"]
    assert [ln.split()[0] for ln in lines if not ln.startswith("-")][1:] == [
        "fuzzer-0",
        "fuzzer-1",
        "verifier-0",
        "total",
    ]
    assert lines[-1].split() == ["total", "3,800", "21.0", "69", "9", "3", "1"]


def test_status_errors_exit_2(tmp_path, capsys):
    assert _cli(["status", "--stats", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl: no such file" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text("{}\n")
    assert _cli(["status", "--stats", str(tmp_path / "bad.jsonl")]) == 2
    assert "bad.jsonl:1: time: missing" in capsys.readouterr().err


def test_format_table_ages_are_relative_to_now():
    latest = {"fuzzer-0": StatsRow(T0, "fuzzer-0", execs=5)}
    assert "2h00m" in format_table(latest, T0 + 7200)
    assert "3d01h" in format_table(latest, T0 + 3 * 86400 + 3600)


def test_dashboard_has_svg_plots_and_a_row_per_signature(tmp_path, capsys):
    stats, crashes = tmp_path / "stats.jsonl", tmp_path / "crashes"
    _campaign(stats)
    write_bundle(crashes, "poisoned-slot.eagle.3f9a")
    write_bundle(
        crashes, "liveness.spec-off.0c11", kind="liveness", summary="request <b> never finished", confirmed=None
    )
    filed = write_bundle(crashes, "contract.neg.77aa", confirmed="not confirmed")
    (filed / "issue.json").write_text(json.dumps({"url": "https://github.com/o/r/issues/4", "number": 4}))
    (write_bundle(crashes, "broken.sig") / "verdict.json").write_text('{"signature": "broken.sig"}')
    out = tmp_path / "site" / "index.html"
    assert (
        _cli(["dashboard", "--stats", str(stats), "--crashes", str(crashes), "--out", str(out)])
        == 0
    )
    page = out.read_text()
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "<script" not in page
    svgs = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    titles = [ET.fromstring(svg).find("{http://www.w3.org/2000/svg}title").text for svg in svgs]
    assert titles == ["Coverage over time", "Findings over time", "exec/s per actor", "Corpus size and verifier queue"]
    assert all("<polyline" in svg for svg in svgs)
    assert "fuzzer-1" in svgs[2] and "verifier-0" not in svgs[2]  # actors that never report exec/s are left out
    rows = re.findall(r'<tr data-signature="([^"]+)">(.*?)</tr>', page, flags=re.S)
    assert [s for s, _ in rows] == ["contract.neg.77aa", "liveness.spec-off.0c11", "poisoned-slot.eagle.3f9a"]
    cells = dict(rows)
    assert 'href="../crashes/poisoned-slot.eagle.3f9a/report.md"' in cells["poisoned-slot.eagle.3f9a"]
    assert ">confirmed<" in cells["poisoned-slot.eagle.3f9a"] and ">pending<" in cells["liveness.spec-off.0c11"]
    assert "request &lt;b&gt; never finished" in cells["liveness.spec-off.0c11"]
    assert 'href="https://github.com/o/r/issues/4"' in cells["contract.neg.77aa"]
    assert re.search(r'<tr class="bad">.*broken\.sig.*verdict\.json: kind: missing', page)


def test_dashboard_without_stats_still_lists_crashes(tmp_path, monkeypatch):
    monkeypatch.setenv("GDNFUZZ_STATS", str(tmp_path / "not-yet.jsonl"))
    write_bundle(tmp_path / "crashes", "poisoned-slot.eagle.3f9a")
    out = tmp_path / "d.html"
    missing = tmp_path / "none.jsonl"
    assert (
        _cli(["dashboard", "--stats", str(missing), "--crashes", str(tmp_path / "crashes"), "--out", str(out)],
        )
        == 2
    )
    assert _cli(["dashboard", "--crashes", str(tmp_path / "crashes"), "--out", str(out)]) == 0
    page = out.read_text()
    assert page.count("no data yet") == 4 and 'data-signature="poisoned-slot.eagle.3f9a"' in page


def test_long_campaigns_are_thinned(tmp_path):
    stats = tmp_path / "stats.jsonl"
    with StatsWriter(stats) as writer:
        for i in range(3000):
            writer.write(StatsRow(T0 + i, "fuzzer-0", execs=i, exec_per_s=1.0, coverage=i))
    out = tmp_path / "d.html"
    assert (
        _cli(["dashboard", "--stats", str(stats), "--crashes", str(tmp_path), "--out", str(out)])
        == 0
    )
    polylines = re.findall(r'points="([^"]*)"', out.read_text())
    assert polylines and max(len(p.split()) for p in polylines) <= MAX_POINTS


def test_ticks_are_round():
    assert nice_ticks(69) == [0, 20, 40, 60, 80]
    assert nice_ticks(0) == [0.0, 1.0]
    assert time_ticks(7200)[:3] == [0.0, 1800.0, 3600.0]
    assert time_ticks(30)[-1] == 30.0


def test_crash_scan_ignores_other_directories(tmp_path):
    (tmp_path / "crashes" / "tmp").mkdir(parents=True)
    assert scan_crashes(tmp_path / "crashes") == [] and scan_crashes(tmp_path / "absent") == []


def _liveness_campaign(path: Path, state: str) -> None:
    """Two fuzzers, fuzzer-1 lost with its node at T0+30 and dead since; the campaign row says ``state``."""
    with StatsWriter(path) as writer:
        for i in range(5):
            t = T0 + 10 * i
            lost = i >= 3
            writer.write(StatsRow(t, "fuzzer-0", execs=100 * i, exec_per_s=10.0, state="alive"))
            writer.write(StatsRow(t, "fuzzer-1", execs=min(100 * i, 200), exec_per_s=0.0 if lost else 10.0,
                                  state="dead" if lost else "alive", restarts=8 if lost else 0))
            writer.write(StatsRow(t, CLUSTER, nodes=2 if lost else 3, nodes_lost=1 if lost else 0,
                                  cpus=2.0 if lost else 3.0, cpus_lost=1.0 if lost else 0.0))
            writer.write(StatsRow(t, CAMPAIGN, state=state if i == 4 else "running"))


def test_status_shows_states_restarts_and_the_capacity_lost(tmp_path):
    path = tmp_path / "stats.jsonl"
    _liveness_campaign(path, "ended")
    table = format_table(latest_by_actor(read_stats(path)), T0 + 100)
    lines = table.splitlines()
    assert lines[0].split() == ["actor", "age", "execs", "exec/s", "coverage", "corpus", "findings", "queue",
                                "state", "restarts"]
    row = next(ln.split() for ln in lines if ln.startswith("fuzzer-1"))
    assert row[3] == "0.0" and row[-2:] == ["dead", "8"]
    assert [ln.split()[0] for ln in lines if not ln.startswith("-")][1:4] == ["fuzzer-0", "fuzzer-1", "total"]
    assert lines[-2:] == ["campaign: ended 60s ago", "cluster: 2 nodes alive, 1 lost; 2 CPUs alive, 1 lost"]
    stale = tmp_path / "stale.jsonl"
    _liveness_campaign(stale, "running")
    assert "campaign: no report for 2m (its driver is gone; gdnfuzz campaign --resume continues it)" in \
        format_table(latest_by_actor(read_stats(stale)), T0 + 200)


def test_the_dashboard_of_an_ended_campaign_shows_no_current_rate(tmp_path):
    stats, out = tmp_path / "stats.jsonl", tmp_path / "d.html"
    _liveness_campaign(stats, "ended")
    assert _cli(["dashboard", "--stats", str(stats), "--crashes", str(tmp_path / "none"), "--out", str(out)]) == 0
    page = out.read_text()
    facts = dict(re.findall(r"<div>([^<]+)<b>([^<]+)</b></div>", page))
    assert "running for" not in facts and "exec/s now" not in facts
    assert facts["ran for"] == "40s" and facts["exec/s average"] == "15.0"  # (400 + 200) execs over 40 s
    assert facts["nodes alive / lost"] == "2 / 1" and facts["CPUs alive / lost"] == "2 / 1"
    assert '<td class="actor-state dead">dead</td>' in page


def test_the_dashboard_of_a_running_campaign_shows_its_rate(tmp_path):
    stats = tmp_path / "stats.jsonl"
    now = time.time()
    with StatsWriter(stats) as writer:
        writer.write(StatsRow(now - 20, "fuzzer-0", execs=10, exec_per_s=4.0, state="alive"))
        writer.write(StatsRow(now, "fuzzer-0", execs=90, exec_per_s=4.0, state="alive"))
        writer.write(StatsRow(now, CAMPAIGN, state="running"))
    facts = dict(re.findall(r"<div>([^<]+)<b>([^<]+)</b></div>",
                            render_dashboard(read_stats(stats), [], tmp_path, now)))
    assert facts["running for"] == "20s" and facts["exec/s now"] == "4.0"


def test_status_json_is_one_object_with_each_actors_latest_row(tmp_path, capsys):
    path = tmp_path / "stats.jsonl"
    _campaign(path)
    assert _cli(["status", "--stats", str(path), "--json"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    report = json.loads(line)
    assert report["stats"] == str(path) and sorted(report["actors"]) == ["fuzzer-0", "fuzzer-1", "verifier-0"]
    assert sum(row["execs"] for row in report["actors"].values()) == 3800


def _facts(page: str) -> dict[str, str]:
    return dict(re.findall(r"<div>([^<]+)<b>([^<]+)</b></div>", page))


@pytest.mark.parametrize(("state", "label"), [("ended", "ended"), ("head-lost", "lost its Ray head")])
def test_a_campaign_that_stopped_is_shown_stopped_with_when_and_for_how_long(tmp_path, state, label):
    stats = tmp_path / "stats.jsonl"
    _liveness_campaign(stats, state)
    facts = _facts(render_dashboard(read_stats(stats), [], tmp_path, T0 + 100))
    assert facts[label] == "2023-11-14 22:14:00 UTC (60s before this page)"  # the last row, T0 + 40
    assert facts["ran for"] == "40s" and facts["exec/s average"] == "15.0"
    assert not {"running for", "exec/s now"} & set(facts)


def test_findings_the_reference_shares_are_marked_as_such(tmp_path):
    crashes = tmp_path / "crashes"
    write_bundle(crashes, "poisoned-slot.eagle.3f9a")
    write_bundle(crashes, "reference-side-poison-unaligned-end-no-spec-internal-checkpoint")
    write_bundle(crashes, "both-side-exception-valueerror-eagle-family-kv-connector")
    page = render_dashboard([], scan_crashes(crashes), tmp_path, T0)
    sides = {s: re.search(r'<td class="side ([a-z]+)">([^<]+)</td>', cells).groups()
             for s, cells in re.findall(r'<tr data-signature="([^"]+)">(.*?)</tr>', page, flags=re.S)}
    assert sides == {"poisoned-slot.eagle.3f9a": ("candidate", "candidate"),
                     "reference-side-poison-unaligned-end-no-spec-internal-checkpoint": ("reference", "reference (known)"),
                     "both-side-exception-valueerror-eagle-family-kv-connector": ("reference", "reference (known)")}
    assert "the reference policy is wrong there too" in page
    own = [c for c in scan_crashes(crashes) if c.signature == "poisoned-slot.eagle.3f9a"]
    assert "the reference policy" not in render_dashboard([], own, tmp_path, T0)  # the legend only where needed


def test_one_fuzzers_coverage_line_is_not_hidden_under_the_total(tmp_path):
    rows = [StatsRow(T0 + i, "fuzzer-0", coverage=10 * i) for i in range(5)]
    svg = ET.fromstring(re.findall(r"<svg .*?</svg>", render_dashboard(rows, [], tmp_path, T0 + 5), flags=re.S)[0])
    ns = "{http://www.w3.org/2000/svg}"
    lines = {p.find(f"{ns}title").text: p for p in svg.iter(f"{ns}polyline")}
    assert list(lines) == ["fuzzer-0", TOTAL]  # the total is drawn last, over the fuzzer's line
    assert lines["fuzzer-0"].get("points") == lines[TOTAL].get("points")  # the same line, both drawn:
    assert lines[TOTAL].get("stroke-dasharray") and not lines["fuzzer-0"].get("stroke-dasharray")  # the total dashed
    assert lines[TOTAL].get("stroke") != lines["fuzzer-0"].get("stroke")
    legend = {t.text for t in svg.iter(f"{ns}text")}
    assert {"fuzzer-0", TOTAL} <= legend
    assert [x.get("stroke-dasharray") for x in svg.iter(f"{ns}line") if x.get("stroke") == lines[TOTAL].get("stroke")]


def test_the_page_names_the_versions_each_run_recorded(tmp_path, capsys):
    crashes, out = tmp_path / "crashes", tmp_path / "d.html"
    crashes.mkdir()
    assert _cli(["dashboard", "--crashes", str(crashes), "--out", str(out)]) == 0
    assert "vLLM version: not recorded" in out.read_text()
    versions = {"vllm": "0.32.0", "gdnfuzz": "0.1.0"}
    record = CampaignRecord({}, (T0,)).with_run(T0 + 1000, versions)  # the first run from before versions
    write_record(crashes, record)
    assert _cli(["dashboard", "--crashes", str(crashes), "--out", str(out)]) == 0
    assert ("Ran against run 1: versions not recorded; run 2: vLLM 0.32.0, gdnfuzz 0.1.0."
            in out.read_text())
    write_record(crashes, CampaignRecord({}, (T0,), (versions,)).with_run(T0 + 1000, versions))
    assert _cli(["dashboard", "--crashes", str(crashes), "--out", str(out)]) == 0
    assert '<p class="versions">Ran against vLLM 0.32.0, gdnfuzz 0.1.0.</p>' in out.read_text()
    (crashes / "campaign.json").write_text(json.dumps({"arguments": {}, "runs": [T0], "versions": [{"vllm": 1}]}))
    assert _cli(["dashboard", "--crashes", str(crashes), "--out", str(out)]) == 2
    assert "campaign.json: versions: expected at most one object of version strings per run" in capsys.readouterr().err


def test_a_run_records_the_versions_it_runs_against():
    found = run_versions()
    assert found["vllm"] == environment()["vllm"] and found["gdnfuzz"] == package_version()
