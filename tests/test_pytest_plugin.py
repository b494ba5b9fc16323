"""The pytest11 plugin (``gdnfuzz_pytest``): a corpus as test items, in a project of its own (pytester).

The fast tests use scenario files that fail to load (a failing item in milliseconds, no vLLM): ids,
``--lf``, ini options and selection are pytest's collection, whatever made an item fail."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from fuzz.model.policies import BUILTINS
from fuzz.oracle.verdict import default_fail_on, fail_on_choices
from fuzz.pytest_server import answer
from gdnfuzz_pytest import BUILTIN_POLICIES, DEFAULT_FAIL_ON, FAIL_ON_CHOICES, Replayer, ReplayerGone

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "corpus" / "regressions" / "pr51113-concurrent-prefills.json"
UNLOADABLE = '{"gdnfuzz_scenario": 0}\n'
TWO = ("--gdnfuzz-candidate", "pre-51113", "--gdnfuzz-candidate", "vllm")


MINE = """from vllm.v1.core.sched.scheduler import Scheduler

split = Scheduler.__dict__["_mamba_block_aligned_split"]
"""


@pytest.mark.slow
def test_corpus_items_fail_on_the_bug_pass_on_the_fix_and_stay_out_of_the_way(pytester):
    """In a project with a ``fuzz`` package of its own, and a candidate of its own (``mine.py:split``: vLLM's
    split, run in a sandbox child of the replay process, which must import gdnfuzz's ``fuzz`` too)."""
    pytester.mkpydir("fuzz").joinpath("__init__.py").write_text('TARGET = "mine"\n')
    pytester.makepyfile(test_own="from fuzz import TARGET\n\ndef test_own():\n    assert TARGET == 'mine'\n", mine=MINE)
    corpus = pytester.path / "corpus"
    corpus.mkdir()
    shutil.copyfile(FILE, corpus / FILE.name)
    alone = pytester.runpytest_subprocess("-q")
    alone.assert_outcomes(passed=1)
    run = pytester.runpytest_subprocess("-q", "-m", "gdnfuzz", "--gdnfuzz-corpus", str(corpus),
                                        "--gdnfuzz-candidate", "pre-51113", "--gdnfuzz-candidate", "vllm",
                                        "--gdnfuzz-candidate", "mine.py:split", "-rA")
    run.assert_outcomes(passed=2, failed=1, deselected=1)
    text = run.stdout.str()
    assert f"FAILED corpus/{FILE.name}::gdnfuzz[pre-51113]" in text and f"PASSED corpus/{FILE.name}::gdnfuzz[vllm]" in text
    assert f"PASSED corpus/{FILE.name}::gdnfuzz[mine.py:split]" in text
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
    run = pytester.runpytest("--gdnfuzz-corpus", "corpus", "--gdnfuzz-candidate", "pre51113")
    assert run.ret == pytest.ExitCode.USAGE_ERROR  # once, before any item: not one failure per item
    run.stderr.fnmatch_lines(["ERROR: --gdnfuzz-candidate: unknown policy 'pre51113' (did you mean pre-51113?): *"])


def test_a_policy_that_cannot_be_loaded_is_a_usage_reply_that_ends_the_session(tmp_path):
    reply = answer({"scenario": str(FILE), "candidate": f"{tmp_path / 'missing.py'}:split", "reference": "vllm",
                    "fail_on": "correctness"})
    assert reply["outcome"] == "usage" and "missing.py" in reply["message"]


def test_the_plugin_knows_the_fail_on_choices_and_policy_names_without_importing_fuzz():
    assert (tuple(fail_on_choices()), default_fail_on()) == (FAIL_ON_CHOICES, DEFAULT_FAIL_ON)
    assert tuple(BUILTINS) == BUILTIN_POLICIES


SHADOWING = """
import sys
from fuzz import TARGET

def test_own(pytestconfig):
    assert TARGET == "mine"
    assert pytestconfig.pluginmanager.get_plugin("gdnfuzz").__file__ == {plugin!r}
    assert "gdnfuzz_pytest" in sys.modules and "fuzz.oracle" not in sys.modules
"""


def test_a_project_with_its_own_fuzz_package_keeps_it_and_the_corpus_items_still_run(pytester):
    """Under ``pytest`` and ``python -m pytest`` alike (the plugin from its installed entry point, as pytest
    loads it, never through ``-p``): the project's ``fuzz`` is its own, gdnfuzz's replays the items."""
    scratch_project(pytester)
    (pytester.path / "test_own.py").unlink()
    pytester.mkpydir("fuzz").joinpath("__init__.py").write_text('TARGET = "mine"\n')
    pytester.makeconftest("")  # the rootdir (and its fuzz/) on sys.path under pytest as well
    pytester.makepyfile(test_own=SHADOWING.format(plugin=str(ROOT / "gdnfuzz_pytest.py")))
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ngdnfuzz_corpus = ["corpus"]\n')
    for run in (pytester.run(Path(sys.executable).parent / "pytest", "-p", "no:cacheprovider"),
                pytester.runpytest_subprocess("-p", "no:cacheprovider")):
        run.assert_outcomes(passed=1, failed=2)
        assert failed_ids(run) == ["corpus/a.json::gdnfuzz[vllm]", "corpus/b.json::gdnfuzz[vllm]"]
        assert "corpus/b.json: gdnfuzz_scenario: expected format version 1, got 0" in run.outlines


ANSWERING = """
import os, sys
for line in sys.stdin:
    if "exit" in line:
        sys.exit(3)
    if "kill" in line:
        os.kill(os.getpid(), 9)
    print("not json" if "garble" in line else '{"outcome": "pass", "message": ""}', flush=True)
"""


def test_a_replay_process_that_ends_without_a_reply_is_said_in_words_and_the_next_ask_starts_another(tmp_path):
    replayer = Replayer([sys.executable, "-c", ANSWERING], dict(os.environ), tmp_path)
    try:
        assert replayer.ask({"scenario": "a"}) == {"outcome": "pass", "message": ""}
        for request, how in (("exit", "exited (exit code 3)"), ("kill", "was killed by SIGKILL"),
                             ("garble", "sent something that is not a reply and was killed")):
            with pytest.raises(ReplayerGone) as gone:
                replayer.ask({"scenario": request})
            assert gone.value.how == how and replayer.proc is None
            assert replayer.ask({"scenario": "b"}) == {"outcome": "pass", "message": ""}
    finally:
        replayer.close()
