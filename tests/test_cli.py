"""The gdnfuzz CLI: replay's table and exit codes, bad input as one line with exit code 2, gen."""

from __future__ import annotations

import json

import pytest
from conftest import seed_case

from fuzz.cli import main
from fuzz.model.scenario import load_scenario


def test_replay_exit_codes_and_table(capsys):
    assert main(["replay", str(seed_case()), "--candidate", "pre-51113", "--reference", "vllm"]) == 1
    out = capsys.readouterr().out
    assert "slot hashed as state@1600 holds state@364" in out and "diverged" in out
    assert main(["replay", str(seed_case()), "--candidate", "vllm"]) == 0
    assert main(["replay", str(seed_case()), "--candidate", "naive", "--json"]) == 1
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["verdict"] == "diverged" and row["poisoned"] == 1 and row["expectation"] == "ok"


def test_replay_takes_a_directory_as_its_json_files_and_names_what_it_skips(tmp_path, capsys):
    import os
    import shutil

    shutil.copyfile(seed_case(), tmp_path / "b.json")
    shutil.copyfile(seed_case(), tmp_path / "a.json")
    (tmp_path / "notes.txt").write_text("not a scenario")
    os.mkfifo(tmp_path / "c.json")
    assert main(["replay", str(tmp_path), "--candidate", "pre-51113", "--json"]) == 1
    captured = capsys.readouterr()
    assert [json.loads(line)["file"] for line in captured.out.splitlines()] == [str(tmp_path / "a.json"),
                                                                                str(tmp_path / "b.json")]
    assert captured.err.strip() == f"gdnfuzz replay: skipped {tmp_path / 'c.json'}: not a regular file (a FIFO)"


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gdnfuzz_scenario": 1, "requests": [{"id": "a", "prompt": [5], "max_tokens": -1}]}))
    assert main(["replay", str(bad)]) == 2
    assert str(bad) in (line := _one_line_error(capsys)) and "requests[0].max_tokens" in line
    assert main(["replay", str(seed_case()), "--candidate", "nope"]) == 2
    assert "unknown policy" in _one_line_error(capsys)
    assert main(["run", "--reference", "pre51113"]) == 2  # before any worker, or vLLM, starts
    assert _one_line_error(capsys).startswith("gdnfuzz run: --reference: unknown policy 'pre51113' (did you mean "
                                              "pre-51113?)")
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def split(self):\n    return 0\n")
    assert main(["replay", str(seed_case()), "--candidate", f"{wrong}:split"]) == 2
    assert "does not fit" in _one_line_error(capsys)
    rejected = tmp_path / "rejected.json"
    data = json.loads(seed_case().read_text())
    data["engine"].update(max_num_batched_tokens=4, max_num_seqs=16, step_budgets=[])  # budgets within it
    rejected.write_text(json.dumps(data))
    assert main(["replay", str(rejected)]) == 2
    assert "vLLM rejects" in _one_line_error(capsys)
    data["engine"].update(max_num_batched_tokens=2048, step_budgets=[364, 4096])
    rejected.write_text(json.dumps(data))
    assert main(["replay", str(rejected)]) == 2
    assert "engine.step_budgets: 4096 exceeds max_num_batched_tokens 2048" in _one_line_error(capsys)


def test_a_bad_step_bound_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--max-steps", "0"])
    assert exit_.value.code == 2 and "--max-steps: expected a positive whole number" in capsys.readouterr().err


def test_external_tokens_run_on_the_sim_tier_through_the_connector(tmp_path, capsys):
    data = json.loads(seed_case().read_text())
    data["requests"][1]["external_tokens"] = 64
    path = tmp_path / "ext.json"
    path.write_text(json.dumps(data))
    assert main(["replay", str(path), "--candidate", "pre-51113", "--json"]) == 1  # the seed bug, with the follower's prefix held externally
    assert json.loads(capsys.readouterr().out.strip())["verdict"] == "diverged"


def test_run_record_lists_each_signature_once_and_its_summary_says_the_same(tmp_path):
    from bundle_fixtures import write_bundle

    from fuzz.cli.run import run_record, run_summary
    from fuzz.search.libfuzzer import EXECS_LINE, STATUS, Progress

    write_bundle(tmp_path, "a", stages=[{"name": "requests", "tried": 3, "kept": 1, "seconds": 0.5}])  # minimized
    write_bundle(tmp_path, "c", stages=[])  # stored as found
    progress = Progress(findings=[(1.0, "a", "raw1"), (2.0, "a", "raw2"), (3.0, "b", "raw3"), (4.0, "c", "raw4")],
                        saved={"a": (1.5, str(tmp_path / "a")), "c": (5.0, str(tmp_path / "c"))},
                        detected={"b": 3.0, "a": 1.0, "c": 4.0}, first_input=0.5)
    progress.feed(0, f"{EXECS_LINE} 40")
    assert STATUS.search(status := "#38	NEW    cov: 120 ft: 300 corp: 9/1Kb exec/s: 19 rss: 500Mb")
    progress.feed(0, status)
    progress.retire(0)  # an ended worker's figures stay in the totals
    progress.feed(0, f"{EXECS_LINE} 2")
    progress.stop(interrupted=True)
    record = run_record(progress, 1, seed=7)
    assert json.loads(json.dumps(record)) == record
    assert [(s["signature"], s["count"], s["state"]) for s in record["signatures"]] == [
        ("a", 2, "minimized"), ("b", 1, None), ("c", 1, "unminimized")]
    assert (record["execs"], record["cov"], record["ft"], record["corpus"], record["seed"]) == (42, 120, 300, 9, 7)
    lines = run_summary(record).splitlines()
    assert lines[0].startswith("gdnfuzz run: interrupted after ") and ": 42 inputs (" in lines[0]
    assert lines[0].endswith("coverage 120 edges (300 features), corpus 9 inputs, seed 7")
    assert lines[1] == "first input after 0.5s, no verdict yet" or lines[1].startswith("first input after 0.5s, first")
    assert lines[2:] == ["3 signatures, 1 repeat:", f"     1.0s  a  x2  minimized  {tmp_path / 'a'}",
                         "     3.0s  b  x1  not stored", f"     4.0s  c  x1  unminimized  {tmp_path / 'c'}"]


def test_gen_writes_valid_scenarios(tmp_path, capsys):
    assert main(["gen", "--seed", "7", "--count", "12", "--out", str(tmp_path)]) == 0
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 12
    for f in files:
        load_scenario(f)


def test_status_where_no_campaign_ran_says_what_it_shows(tmp_path, capsys):
    assert main(["status", "--stats", str(tmp_path / "stats.jsonl")]) == 2
    line = _one_line_error(capsys)
    assert "no such file: `gdnfuzz status` shows a campaign's stats" in line and "`gdnfuzz run` prints its own" in line
