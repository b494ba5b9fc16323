"""Every reader of user files refuses bad bytes with one InputError naming file and field (issue 15,
items 2 and 5), and the atheris reader targets' seeds and found inputs stay regression tests."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import seed_case

from fuzz.cli import main
from fuzz.errors import FieldError, InputError
from fuzz.model import json_input
from fuzz.model.result import (
    Chunk,
    Fault,
    PoisonedSlot,
    RequestOutcome,
    RunResult,
    RunStatus,
    SplitDisagreement,
    StepRecord,
)
from fuzz.model.scenario import Scenario, ScenarioError, load_scenario
from fuzz.search.reader_targets import FAMILIES, ReaderTarget, seed_inputs
from fuzz.store.bundle import BundleError, load_bundle, load_verdict
from fuzz.store.stats import StatsError, read_stats
from fuzz.triage.baseline import MAX_BASELINE_BYTES, read_baseline

DATA = Path(__file__).resolve().parent / "data" / "reader_inputs"
SCENARIO = json.loads(seed_case().read_text())


def _fail(field: str, message: str) -> InputError:
    return ScenarioError(field, message, "f.json")


HOSTILE_JSON = [
    (b"[" * 100_000, "nested deeper"),
    (b"[" * 70 + b"]" * 70, "nested deeper"),
    (b'{"a": ' + b"9" * 5000 + b"}", "digits"),
    (b'{"a": NaN}', "NaN"),
    (b'{"a": -Infinity}', "Infinity"),
    (b'{"a": 1e999}', "finite"),
    (b'{"a": "\\ud800"}', "surrogate"),
    (b"\xff\xfe{}", "UTF-8"),
    (b"{", "not valid JSON"),
]


@pytest.mark.parametrize(("raw", "why"), HOSTILE_JSON)
def test_json_input_refuses_what_is_not_plain_json(raw, why):
    with pytest.raises(ScenarioError, match=why):
        json_input.parse_json(raw, _fail)


def test_json_input_file_errors(tmp_path):
    with pytest.raises(ScenarioError, match="directory"):
        json_input.read_json(tmp_path, _fail)
    with pytest.raises(ScenarioError, match="no such file"):
        json_input.read_json(tmp_path / "absent", _fail)
    big = tmp_path / "big"
    big.write_bytes(b" " * 101)
    with pytest.raises(ScenarioError, match="larger than 100 bytes"):
        json_input.read_json(big, _fail, max_bytes=100)
    if os.geteuid() != 0:  # root reads every file
        locked = tmp_path / "locked"
        locked.write_text("{}")
        locked.chmod(0)
        with pytest.raises(ScenarioError, match="permission"):
            json_input.read_json(locked, _fail)


def _scenario(tmp_path: Path, **changes) -> Path:
    data = json.loads(json.dumps(SCENARIO))
    for dotted, value in changes.items():
        *head, last = dotted.split("__")
        node = data
        for part in head:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("changes", "field"), [
    ({"requests__1__continues": ["a"]}, "requests[1].continues"),
    ({"requests__1__continues": {"a": 1}}, "requests[1].continues"),
    ({"expect": "diverged"}, "expect"),
    ({"expect": ["diverged"]}, "expect"),
    ({"expect": {"vllm": "bogus"}}, "expect.vllm"),
    ({"note": 3}, "note"),
    ({"requests__0__id": "préfill"}, "requests[0].id"),
    ({"requests__0__id": "a\u0661"}, "requests[0].id"),  # an Arabic-Indic digit: isalnum, not ASCII
    ({"gdnfuzz_scenario": True}, "gdnfuzz_scenario"),
    ({"seed": 2 ** 64}, "seed"),
])
def test_scenario_fields_of_the_wrong_shape_are_named(tmp_path, changes, field):
    path = _scenario(tmp_path, **changes)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.field_path == field and caught.value.file == str(path)


def test_every_verdict_status_is_a_valid_expectation(tmp_path):
    from fuzz.model.result import VerdictStatus

    for status in VerdictStatus:
        load_scenario(_scenario(tmp_path, expect={"vllm": status.value}))


@pytest.mark.parametrize("content", [b"[" * 100_000, b'{"gdnfuzz_scenario": 1, "seed": ' + b"9" * 5000 + b"}",
                                     b"\xff", b'{"gdnfuzz_scenario": 1, "seed": NaN}'])
def test_replay_of_hostile_files_is_one_line_and_exit_2(tmp_path, capsys, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    assert main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0], err


def test_replay_of_a_directory_without_scenarios_is_exit_2(tmp_path, capsys):
    assert main(["replay", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"gdnfuzz replay: {tmp_path}: no scenario files (*.json) to replay"


def test_replay_keeps_the_rows_of_good_files_when_one_is_bad(tmp_path, capsys):
    bad = _scenario(tmp_path, expect="diverged")
    assert main(["replay", str(seed_case()), str(bad), str(seed_case()), "--candidate", "pre-51113"]) == 2
    out, err = capsys.readouterr()
    rows = out.strip().splitlines()[1:]
    assert len(rows) == 3 and "diverged" in rows[0] and "error" in rows[1] and "diverged" in rows[2]
    assert "1 of 3 files could not be replayed" in err and len(err.strip().splitlines()) == 1


def test_bundle_readers_refuse_bad_bytes_in_any_file(tmp_path):
    target = ReaderTarget("bundle", tmp_path)
    assert target.read(seed_inputs("bundle")[0]).signature == "poisoned-slot-seed"
    for index in range(4):
        for body in (b"\xff\xfe", b"[" * 10_000, b'{"signature": NaN}', b"null"):
            if index == 3 and body in (b"[" * 10_000, b'{"signature": NaN}', b"null"):
                continue  # report.md is free text: only its encoding is checked
            with pytest.raises(BundleError):
                load_bundle(_bundle_with(target, index, body))
    (tmp_path / "poisoned-slot-seed" / "report.md").unlink()
    (tmp_path / "poisoned-slot-seed" / "report.md").mkdir()
    with pytest.raises(BundleError, match="report.md"):
        load_bundle(tmp_path / "poisoned-slot-seed")


def _bundle_with(target: ReaderTarget, index: int, body: bytes) -> Path:
    from fuzz.search.reader_targets import _bundle_files

    files = _bundle_files()
    files[list(files)[index]] = body
    for name, content in files.items():
        (target.bundle / name).write_bytes(content)
    return target.bundle


@pytest.mark.parametrize("hits", ["many", [1], -1, True, 1.5])
def test_a_verdict_with_bad_hits_is_refused(tmp_path, hits):
    from fuzz.search.reader_targets import SEED_VERDICT

    path = tmp_path / "verdict.json"
    path.write_text(json.dumps({**SEED_VERDICT, "hits": hits}))
    with pytest.raises(BundleError, match="hits"):
        load_verdict(path)


STATS_LINES = [
    b'{"time": NaN, "actor": "a"}\n',
    b'{"time": 1, "actor": "a", "exec_per_s": Infinity}\n',
    b'{"time": 1e400, "actor": "a"}\n',
    b'{"time": 1e300, "actor": "a"}\n',  # finite, but would send the dashboard's time axis to infinity
    b'{"time": -5, "actor": "a"}\n',
    b'{"time": 1, "actor": "a", "execs": ' + b"9" * 30 + b"}\n",
    b"[" * 100_000 + b"\n",
    b"\xff\n",
]


@pytest.mark.parametrize("line", STATS_LINES)
def test_status_and_dashboard_refuse_bad_stats_with_exit_2(tmp_path, capsys, line):
    stats = tmp_path / "stats.jsonl"
    stats.write_bytes(line)
    with pytest.raises(StatsError):
        read_stats(stats)
    assert main(["status", "--stats", str(stats)]) == 2
    assert main(["dashboard", "--stats", str(stats), "--crashes", str(tmp_path / "none"),
                 "--out", str(tmp_path / "d.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(str(stats) in e for e in err), err


def test_status_and_dashboard_refuse_a_directory_as_the_stats_file(tmp_path, capsys):
    assert main(["status", "--stats", str(tmp_path)]) == 2
    assert main(["dashboard", "--stats", str(tmp_path), "--out", str(tmp_path / "d.html")]) == 2
    assert capsys.readouterr().err.count("is a directory") == 2


def test_schedule_entries_of_the_wrong_shape_are_named(tmp_path):
    from workers.kernels.schedule import read_schedule

    good = json.loads(seed_inputs("schedule")[0])
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(good))
    assert len(read_schedule(path)) == 1
    for dotted, value in [("steps", [{"step": "x", "budget": 1}]), ("status", "bogus"),
                          ("requests", {"a": {"id": "a", "prompt_tokens": 1, "output_tokens": ["x"]}}),
                          ("faults", [{"kind": "hang"}]), ("notes", "x")]:
        broken = json.loads(json.dumps(good))
        broken["entries"][0]["result"][dotted] = value
        path.write_text(json.dumps(broken))
        with pytest.raises(ScenarioError, match=f"entries\\[0\\].result.{dotted}"):
            read_schedule(path)


def test_a_schedule_reads_back_the_run_it_was_written_from(tmp_path):
    """Every field of a RunResult set: the entry read back is equal, as the dataclasses type it (an enum as the
    enum, ``conditions`` a tuple, an integer given for a float as a float)."""
    from workers.kernels.schedule import ScheduleEntry, read_schedule, request_tokens, write_schedule  # noqa: PLC0415

    scenario = Scenario.from_dict(json.loads(seed_inputs("schedule")[0])["entries"][0]["scenario"])
    result = RunResult(
        "engine", "vllm", "f" * 16, RunStatus.UNSUPPORTED,
        requests={"a": RequestOutcome("a", 84, 64, "s", False, [1, 2], "d", [1, 2], [-0.5, 0.0], [{"1": -0.5}], 0, 4,
                                      "FINISHED_LENGTH"), "b": RequestOutcome("b", 95)},
        steps=[StepRecord(0, 40, [Chunk("a", 0, 40, 2, 1, None, [3, 4], 0, 32, 5)], [[1, 2]], 1)],
        poisoned=[PoisonedSlot(1, 2, "b", 0, 64, None, "state of 3 foreign tokens")], faults=[Fault("hang", "x", 3)],
        hashed_mamba_blocks=7, notes=["n"],
        disagreement=SplitDisagreement(1, "a", 0, 40, 32, 40, "stopped-short", "lcp", "past-lcp", ("junction",)))
    write_schedule(tmp_path / "s.json", [ScheduleEntry(scenario, result, request_tokens(scenario, result), "x")])
    (read,) = read_schedule(tmp_path / "s.json")
    assert read.result == result and read.tokens == request_tokens(scenario, result)
    assert type(read.result.status) is RunStatus and type(read.result.disagreement.conditions) is tuple
    assert type(read.result.steps[0].seconds) is float

@pytest.mark.parametrize("family", FAMILIES)
def test_reader_targets_accept_their_seeds_and_found_inputs(tmp_path, family):
    """Each family's seeds read as valid objects; every input kept under tests/data/reader_inputs/
    (ones the atheris targets once crashed on, and the hostile ones above) reads or is an InputError."""
    target = ReaderTarget(family, tmp_path)
    for seed in seed_inputs(family):
        assert target.read(seed) is not None
    for found in sorted((DATA / family).glob("*")) if (DATA / family).is_dir() else ():
        target(found.read_bytes())
    for raw, _ in HOSTILE_JSON:
        target(raw)


def _within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``, failing the test instead of hanging it when it takes longer than ``seconds``."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test below
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds}s"
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.mark.parametrize("kind", ["FIFO", "socket", "character device"])
def test_a_file_that_is_not_regular_is_refused_without_blocking(tmp_path, kind):
    keep = socket.socket(socket.AF_UNIX)
    path = {"FIFO": tmp_path / "f.json", "socket": tmp_path / "s.json", "character device": Path("/dev/zero")}[kind]
    if kind == "FIFO":
        os.mkfifo(path)
    elif kind == "socket":
        keep.bind(str(path))
    with keep, pytest.raises(ScenarioError, match=f"<file>: not a regular file \\(a {kind}\\)"):
        _within(5, lambda: json_input.read_json(path, _fail))


NEVER_HELD = 64 << 20  # bytes: far below the gigabyte a reader that read the whole file would hold


def _peak_and_stop() -> int:
    """The most memory Python held since ``tracemalloc.start()`` (then stops tracing)."""
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_a_sparse_gigabyte_is_refused_by_its_size_before_a_byte_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    tracemalloc.start()
    with pytest.raises(ScenarioError, match="larger than 268435456 bytes \\(1073741824 bytes\\)"):
        json_input.read_json(big, _fail)
    with pytest.raises(FieldError, match="baseline: cannot be read \\(larger than"):
        read_baseline(big)
    assert _peak_and_stop() < NEVER_HELD  # refused by its size: the gigabyte was never read into memory


def test_a_baseline_is_read_a_line_at_a_time(tmp_path):
    path = tmp_path / "known.txt"
    path.write_text("# known\nsplit-at-defer-runs-past\r\n\nboth-side-x  # upstream\n")
    assert read_baseline(path) == {"split-at-defer-runs-past", "both-side-x"}
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(FieldError, match="not a regular file \\(a FIFO\\)"):
        _within(5, lambda: read_baseline(tmp_path / "fifo"))
    path.write_bytes(b"ok\n" + b"x" * MAX_BASELINE_BYTES)  # one line past the limit: refused before it is held
    with pytest.raises(FieldError, match="larger than"):
        read_baseline(path)


def test_replay_of_a_fifo_is_one_line_and_exit_2(tmp_path, capsys):
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    assert _within(30, lambda: main(["replay", str(fifo)])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{fifo}: <file>: not a regular file (a FIFO)" in err[0], err


def test_compare_skips_what_is_not_a_regular_file_in_a_directory_with_a_note(tmp_path, capsys):
    shutil.copyfile(seed_case(), tmp_path / "a.json")
    os.mkfifo(tmp_path / "b.json")
    (tmp_path / "c.json").mkdir()
    argv = ["compare", str(tmp_path), "--candidate", "pre-51113", "--reference", "vllm"]
    assert _within(120, lambda: main(argv)) == 0
    out, err = capsys.readouterr()
    assert f"skipped {tmp_path / 'b.json'}: not a regular file (a FIFO)" in err
    assert f"skipped {tmp_path / 'c.json'}: is a directory, not a file" in err
    assert "1 of 1 scenarios compared" in out


def test_the_dashboard_never_opens_a_fifo_named_issue_json(tmp_path):
    from bundle_fixtures import write_bundle

    from fuzz.report.dashboard import scan_crashes

    os.mkfifo(write_bundle(tmp_path / "crashes", "poisoned-slot-seed") / "issue.json")
    [row] = _within(5, lambda: scan_crashes(tmp_path / "crashes"))
    assert row.issue_url is None and row.error is None


def test_a_sparse_gigabyte_in_a_queue_is_read_as_libfuzzer_reads_it(tmp_path):
    from fuzz.model.scenario import Scenario
    from fuzz.triage.coverage import read_input

    entry = tmp_path / "queue-entry"
    with open(entry, "wb") as f:
        f.write(seed_case().read_bytes())
        f.truncate(1 << 30)
    tracemalloc.start()
    assert isinstance(read_input(entry), Scenario)
    assert _peak_and_stop() < NEVER_HELD  # only the first -max_len bytes were read, as libFuzzer reads them
