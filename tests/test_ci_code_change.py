"""gdnfuzz ci in code-change form over a real git history of the installed vLLM's scheduling files.

The repository is built here, as a PR branch would be: ``A`` holds the installed vLLM 0.32.0's files
(what ``origin/main`` points at), ``B`` puts the pre-#51113 split in (the seed bug), ``R`` (on ``B``)
reverts it, ``U`` (on ``B``) changes only a comment, and ``X`` (on ``A``) holds a split that does not
parse. Each PR's work tree is a ``git worktree`` of
it; the base is read from git objects. Replay-only (``--fuzz-time 0``) on two corpus files.
"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from checkout_fixtures import SCHEDULER, make_checkout, replace_split
from test_ci import SCHEMAS, SIG, corpus  # noqa: F401  (the two-file corpus fixture)
from test_issue_filing import TOKEN

from fuzz.cli import main

SYMPTOM = "poison-unaligned-end-past-lcp-eagle-family"  # the seed bug's symptom, where no root cause is named


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=dev", "-c", "user.email=dev@example.invalid",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> dict[str, Path | str]:
    """name -> sha for the commits, and ``wt-<name>`` -> a work tree checked out at it."""
    top = tmp_path_factory.mktemp("code-change")
    repo = make_checkout(top / "vllm")
    scheduler = repo / SCHEDULER
    installed = scheduler.read_text()
    _git(repo, "init", "-q", "-b", "main")
    shas: dict[str, Path | str] = {"A": _commit(repo, "[Core] v1 core as installed")}
    _git(repo, "update-ref", "refs/remotes/origin/main", str(shas["A"]))  # the upstream default branch
    replace_split(repo)
    shas["B"] = _commit(repo, "[Core] Gate mamba chunk alignment on last_cache_position")
    scheduler.write_text(installed)
    shas["R"] = _commit(repo, "Revert the pre-#51113 split")
    _git(repo, "checkout", "-q", str(shas["B"]))
    request = repo / "vllm" / "v1" / "request.py"
    request.write_text(request.read_text() + "# a comment\n")
    shas["U"] = _commit(repo, "[Misc] A comment in request.py")
    _git(repo, "checkout", "-q", str(shas["A"]))
    scheduler.write_text(installed.replace("def _mamba_block_aligned_split(", "def _mamba_block_aligned_split((", 1))
    shas["X"] = _commit(repo, "[WIP] A split that does not parse")
    _git(repo, "checkout", "-q", "main")
    for name in ("B", "R", "U"):
        _git(repo, "worktree", "add", "-q", "--detach", str(top / f"wt-{name}"), str(shas[name]))
        shas[f"wt-{name}"] = top / f"wt-{name}"
    return shas


def _ci(corpus: Path, out: Path, *extra: str) -> int:  # noqa: F811
    return main(["ci", "--corpus", str(corpus), "--fuzz-time", "0", "--out", str(out), *extra])


def _results(out: Path) -> dict[str, str]:
    """signature -> SARIF baselineState, after checking the three reports against their schemas."""
    sarif = json.loads((out / "gdnfuzz.sarif").read_text())
    jsonschema.validate(sarif, json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text()))
    xmlschema.XMLSchema(SCHEMAS / "JUnit.xsd").validate(out / "junit.xml")
    assert (out / "summary.md").is_file()
    return {r["ruleId"]: r["baselineState"] for r in sarif["runs"][0]["results"]}


@pytest.mark.slow
def test_a_pr_that_brings_the_seed_bug_has_exactly_it_as_new_against_the_merge_base(tmp_path, corpus, history):  # noqa: F811
    out = tmp_path / "out"
    assert _ci(corpus, out, "--checkout", str(history["wt-B"]), "--candidate-mode", "split") == 1
    assert _results(out) == {SIG: "new"}
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**gdnfuzz: FAILED**: 1 new signature")
    assert f"against the base {str(history['A'])[:12]} ([Core] v1 core as installed)" in summary
    [failure] = ET.parse(out / "junit.xml").getroot().findall(".//failure")
    assert failure.get("message") == f"new signature {SIG}"
    assert _git(history["wt-B"], "status", "--porcelain") == ""  # the PR's checkout is only read


@pytest.mark.slow
def test_whole_branch_mode_is_the_default_and_finds_the_same_bug_new(tmp_path, corpus, history):  # noqa: F811
    out = tmp_path / "out"
    assert _ci(corpus, out, "--checkout", str(history["wt-B"])) == 1
    assert _results(out) == {SYMPTOM: "new"}  # a whole branch records no split decision: named by its symptom


@pytest.mark.slow
def test_a_pr_that_reverts_the_bug_has_nothing_new(tmp_path, corpus, history):  # noqa: F811
    out = tmp_path / "out"
    assert _ci(corpus, out, "--checkout", str(history["wt-R"]), "--base", str(history["B"]),
               "--candidate-mode", "split") == 0
    assert _results(out) == {f"reference-side-{SYMPTOM}": "unchanged"}  # the base has it, the PR fixes it
    assert (out / "summary.md").read_text().startswith("**gdnfuzz: passed**")


@pytest.mark.slow
def test_a_bug_the_base_already_has_is_not_new(tmp_path, corpus, history):  # noqa: F811
    out = tmp_path / "out"
    assert _ci(corpus, out, "--checkout", str(history["wt-U"]), "--base", str(history["B"]),
               "--candidate-mode", "split") == 0
    assert _results(out) == {f"both-side-{SYMPTOM}": "unchanged"}
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**gdnfuzz: passed**") and "it reproduces on the base" in summary


@pytest.mark.slow
@pytest.mark.parametrize("base", ["no-such-revision", None, "X"])
def test_a_base_git_cannot_give_is_exit_5_with_every_report_written(tmp_path, corpus, history, capsys, base):  # noqa: F811
    out = tmp_path / "out"
    if base is None:  # no upstream branch to take the merge base with
        lonely = make_checkout(tmp_path / "lonely")
        _git(lonely, "init", "-q", "-b", "main")
        _commit(lonely, "only")
        argv = ["--checkout", str(lonely)]
    else:  # a revision that is not there, or one whose split cannot be loaded
        argv = ["--checkout", str(history["wt-B"]), "--base", str(history.get(base, base)), "--candidate-mode", "split"]
    assert _ci(corpus, out, *argv) == 5
    assert _results(out) == {}
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**gdnfuzz: ERROR**: nothing was judged: the base")
    assert {"X": "syntax error", None: "no default upstream branch"}.get(base, "no commit") in summary.splitlines()[0]
    [error] = ET.parse(out / "junit.xml").getroot().findall(".//error")
    assert error.get("type") == "gdnfuzz.infrastructure"
    sarif = json.loads((out / "gdnfuzz.sarif").read_text())
    assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.slow
def test_an_unreachable_api_is_exit_5_with_every_report_written(tmp_path, corpus, history, monkeypatch):  # noqa: F811
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GDNFUZZ_GITHUB_MAX_WAIT", "1")
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    out = tmp_path / "out"
    assert _ci(corpus, out, "--checkout", str(history["wt-B"]), "--candidate-mode", "split",
               "--baseline-issues", "octo/vllm") == 5
    assert _results(out) == {SIG: "new"}
    assert (out / "summary.md").read_text().startswith("**gdnfuzz: ERROR**: the baseline could not be read")
    [error] = ET.parse(out / "junit.xml").getroot().findall(".//error")
    assert f"signature {SIG} could not be checked" in error.get("message")
