"""Human output: `replay` streams a row per file (plain lines in a log, styled lines over a progress bar on a
terminal) and `status` draws a rich table on a terminal, plain lines elsewhere, never a hand-written screen clear."""

from __future__ import annotations

import io
import re
import shutil

import pytest
from conftest import seed_case
from rich.console import Console

from fuzz.cli import main
from fuzz.cli import replay as replay_cli
from fuzz.cli import status as status_cli
from fuzz.cli.replay_output import HEADERS, row_view
from fuzz.report.status_table import format_table, status_renderable
from fuzz.store.stats import CAMPAIGN, CLUSTER, StatsRow, StatsWriter, latest_by_actor

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
T0 = 1_700_000_000.0


def _row(name: str, verdict: str = "clean", signature: str = "clean", outcome: str = "clean",
         kind: str = "") -> dict:
    return {"file": name, "tier": "sim", "verdict": verdict, "outcome": outcome, "signature": signature,
            "resumed": 1, "poisoned": 0, "expectation": "ok", "kind": kind, "efficiency": []}


ROWS = [_row("a.json"), _row("long-name.json", "diverged", "reference-side-poison-unaligned-end", "known",
                                 "slot hashed as state@32 holds state@16")]


def test_plain_rows_are_one_line_per_file_under_a_header(capsys):
    with row_view(["a.json", "long-name.json"], "sim", as_json=False, console=None) as show:
        show(ROWS[:1])
        assert capsys.readouterr().out.splitlines()[1].split() == ["a.json", "sim", "clean", "clean", "clean", "1",
                                                                   "0", "ok"]  # shown before the next file runs
        show(ROWS[1:])
    [line] = capsys.readouterr().out.splitlines()
    assert line.split(maxsplit=8) == ["long-name.json", "sim", "diverged", "known",
                                      "reference-side-poison-unaligned-end", "1", "0", "ok",
                                      "slot hashed as state@32 holds state@16"]
    assert "\x1b" not in line


def test_plain_columns_start_as_wide_as_what_is_known_before_any_file_runs(capsys):
    with row_view(["a.json", "long-name.json"], "sim", as_json=False, console=None) as show:
        show(ROWS[:1])
    header, first = capsys.readouterr().out.splitlines()
    assert header.split() == list(HEADERS)
    for column in ("tier", "verdict", "outcome"):  # the file names and every verdict are known up front
        assert header.index(column) == first.index(ROWS[0][column], header.index(column))


def test_a_terminal_gets_the_same_cells_styled_above_a_progress_bar_that_leaves_no_trace():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200, color_system="standard")
    with row_view(["a.json", "long-name.json"], "sim", as_json=False, console=console) as show:
        for row in ROWS:
            show([row])
    text = out.getvalue()
    assert "\x1b[1;31mdiverged" in text and "\x1b[33mknown" in text  # verdict and outcome in their styles
    lines = [ANSI.sub("", line).rstrip() for line in text.replace("\r", "\n").splitlines()]
    rows = [line.split(maxsplit=8) for line in lines if line.startswith(("a.json", "long-name.json"))]
    assert rows == [["a.json", "sim", "clean", "clean", "clean", "1", "0", "ok"],
                    ["long-name.json", "sim", "diverged", "known", "reference-side-poison-unaligned-end", "1", "0",
                     "ok", "slot hashed as state@32 holds state@16"]]
    assert next(line for line in lines if line.startswith("file")).split() == list(HEADERS)


def test_replay_prints_each_files_row_before_the_next_file_runs(tmp_path, capsys, monkeypatch):
    for name in ("a.json", "b.json"):
        shutil.copyfile(seed_case(), tmp_path / name)
    seen_before_each_run: list[str] = []
    real = replay_cli.replay

    def replay_noting_the_output(*args, **kwargs):
        seen_before_each_run.append(capsys.readouterr().out)
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_cli, "replay", replay_noting_the_output)
    assert main(["replay", str(tmp_path), "--candidate", "vllm"]) == 0
    first, second = seen_before_each_run
    assert first.split() == list(HEADERS)  # the header at once, no row yet
    assert second.split()[:3] == [str(tmp_path / "a.json"), "sim", "clean"]  # a.json's row before b.json runs
    assert capsys.readouterr().out.split()[:3] == [str(tmp_path / "b.json"), "sim", "clean"]


def _latest() -> dict[str, StatsRow]:
    return latest_by_actor([
        StatsRow(T0, "fuzzer-0", execs=1200, exec_per_s=10.0, coverage=51, state="alive"),
        StatsRow(T0, "fuzzer-1", execs=200, state="dead", restarts=8),
        StatsRow(T0, CLUSTER, nodes=2, nodes_lost=1, cpus=2.0, cpus_lost=1.0),
        StatsRow(T0, CAMPAIGN, state="ended"),
    ])


def test_status_on_a_terminal_is_a_rich_table_of_the_same_cells():
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=120, color_system="standard").print(
        status_renderable(_latest(), T0 + 60))
    text = out.getvalue()
    assert "\x1b[1;31mdead" in text and "\x1b[1mtotal" in text  # a coloured state, the totals as the footer
    lines = ANSI.sub("", text).rstrip().splitlines()
    assert lines[0].split() == ["actor", "age", "execs", "exec/s", "coverage", "corpus", "findings", "queue",
                                "state", "restarts"]
    assert [line.split()[0] for line in lines if not line.startswith("─")][1:4] == ["fuzzer-0", "fuzzer-1", "total"]
    assert lines == format_table(_latest(), T0 + 60).replace("-" * 80, "─" * 80).splitlines()  # the same cells


def test_status_watch_on_a_terminal_redraws_in_place_without_a_hand_written_clear(tmp_path, capsys, monkeypatch):
    path = tmp_path / "stats.jsonl"
    with StatsWriter(path) as writer:
        for row in _latest().values():
            writer.write(row)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich's own switch: this stdout is a terminal
    monkeypatch.setenv("COLUMNS", "300")

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_cli.time, "sleep", interrupt)
    assert main(["status", "--stats", str(path), "--watch", "1"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out and "\x1b[1;31mdead" in out  # rich's table, not the hand-written clear
    heading, header = ANSI.sub("", out).splitlines()[:2]
    assert heading.rstrip().endswith(str(path)) and header.split()[:3] == ["actor", "age", "execs"]


@pytest.mark.parametrize("watch", [[], ["--watch", "1"]])
def test_status_in_a_log_is_plain_lines(tmp_path, capsys, monkeypatch, watch):
    path = tmp_path / "stats.jsonl"
    with StatsWriter(path) as writer:
        for row in _latest().values():
            writer.write(row)

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(status_cli.time, "sleep", interrupt)
    assert main(["status", "--stats", str(path), *watch]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "\x1b" not in out and (lines[0].endswith(str(path)) if watch else lines[0].startswith("actor"))
    assert lines[-3].split() == ["total", "1,400", "10.0", "51", "0", "0", "0", "-", "8"]
    assert lines[-1] == "cluster: 2 nodes alive, 1 lost; 2 CPUs alive, 1 lost"
