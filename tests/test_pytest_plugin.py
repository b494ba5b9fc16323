"""The pytest11 plugin: a corpus as test items, in a project of its own (pytester).

The fast tests use scenario files that fail to load (a failing item in milliseconds, no vLLM): ids,
``--lf``, ini options and selection are pytest's collection, whatever made an item fail."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "corpus" / "regressions" / "pr51113-concurrent-prefills.json"
UNLOADABLE = '{"gdnfuzz_scenario": 0}\n'
TWO = ("--gdnfuzz-candidate", "pre-51113", "--gdnfuzz-candidate", "vllm")


@pytest.mark.slow
def test_corpus_items_fail_on_the_bug_pass_on_the_fix_and_stay_out_of_the_way(pytester):
    pytester.makepyfile(test_own="def test_own():\n    assert True\n")
    corpus = pytester.path / "corpus"
    corpus.mkdir()
    shutil.copyfile(FILE, corpus / FILE.name)
    alone = pytester.runpytest_subprocess("-q")
    alone.assert_outcomes(passed=1)
    run = pytester.runpytest_subprocess("-q", "-m", "gdnfuzz", "--gdnfuzz-corpus", str(corpus),
                                        "--gdnfuzz-candidate", "pre-51113", "--gdnfuzz-candidate", "vllm", "-rA")
    run.assert_outcomes(passed=1, failed=1, deselected=1)
    text = run.stdout.str()
    assert f"FAILED corpus/{FILE.name}::gdnfuzz[pre-51113]" in text and f"PASSED corpus/{FILE.name}::gdnfuzz[vllm]" in text
    assert "verdict diverged" in text and "reproduce: gdnfuzz replay" in text


def scratch_project(pytester: pytest.Pytester) -> None:
    """One passing test of the project's own and a corpus of two scenario files that fail to load."""
    pytester.makepyfile(test_own="def test_own():\n    assert True\n")
    for name in ("corpus/a.json", "corpus/b.json", "other/c.json"):
        (pytester.path / name).parent.mkdir(exist_ok=True)
        (pytester.path / name).write_text(UNLOADABLE)


def failed_ids(run: pytest.RunResult) -> list[str]:
    return [line.split(" ")[1] for line in run.outlines if line.startswith("FAILED ")]


def collected(run: pytest.RunResult) -> list[str]:
    return [line for line in run.outlines if "::" in line]


def test_a_printed_id_passed_back_runs_that_item_alone_and_lf_runs_the_failed_ones(pytester):
    scratch_project(pytester)
    first = pytester.runpytest("--gdnfuzz-corpus", "corpus", *TWO, "-k", "pre-51113")
    first.assert_outcomes(failed=2, deselected=3)
    assert failed_ids(first) == ["corpus/a.json::gdnfuzz[pre-51113]", "corpus/b.json::gdnfuzz[pre-51113]"]
    assert "corpus/a.json: gdnfuzz_scenario: expected format version 1, got 0" in first.outlines  # one line
    alone = pytester.runpytest("--gdnfuzz-corpus", "corpus", *TWO, failed_ids(first)[1])
    alone.assert_outcomes(failed=1)
    assert failed_ids(alone) == ["corpus/b.json::gdnfuzz[pre-51113]"]
    last_failed = pytester.runpytest("--gdnfuzz-corpus", "corpus", *TWO, "--lf")
    last_failed.assert_outcomes(failed=2)  # neither the vllm items nor test_own (never failed)
    last_failed.stdout.fnmatch_lines(["run-last-failure: rerun previous 2 failures*"])
    assert failed_ids(last_failed) == failed_ids(first)


def test_ini_options_are_read_relative_to_the_ini_file_and_the_command_line_wins(pytester, monkeypatch):
    scratch_project(pytester)
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ngdnfuzz_corpus = ["corpus"]\n'
                               'gdnfuzz_candidates = ["pre-51113", "vllm"]\n')
    ids = ["corpus/a.json::gdnfuzz[pre-51113]", "corpus/a.json::gdnfuzz[vllm]",
           "corpus/b.json::gdnfuzz[pre-51113]", "corpus/b.json::gdnfuzz[vllm]"]
    assert collected(pytester.runpytest("--collect-only", "-q")) == [*ids, "test_own.py::test_own"]
    assert collected(pytester.runpytest("--collect-only", "-q", "-k", "b.json and vllm")) == [ids[3]]
    assert collected(pytester.runpytest("--collect-only", "-q", "--gdnfuzz-candidate", "vllm")) == [
        ids[1], ids[3], "test_own.py::test_own"]
    assert collected(pytester.runpytest("--collect-only", "-q", "--gdnfuzz-corpus", "other", "-m", "gdnfuzz")) == [
        "other/c.json::gdnfuzz[pre-51113]", "other/c.json::gdnfuzz[vllm]"]
    assert collected(pytester.runpytest("--collect-only", "-q", "-p", "no:gdnfuzz")) == ["test_own.py::test_own"]
    (pytester.path / "sub").mkdir()
    monkeypatch.chdir(pytester.path / "sub")
    assert collected(pytester.runpytest("--collect-only", "-q", "-m", "gdnfuzz")) == ids


def test_a_bad_setting_is_a_usage_error_naming_it(pytester):
    scratch_project(pytester)
    pytester.makeini("[pytest]\ngdnfuzz_corpus = nowhere\n")
    run = pytester.runpytest("--collect-only")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines([f"ERROR: {pytester.path / 'tox.ini'}: gdnfuzz_corpus: {pytester.path / 'nowhere'}: "
                              "no such directory"])
    run = pytester.runpytest("--collect-only", "--gdnfuzz-corpus", "corpus", "-o", "gdnfuzz_fail_on=nope")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(["ERROR: *tox.ini: gdnfuzz_fail_on: 'nope' is not one of correctness, *"])
