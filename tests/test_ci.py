"""gdnfuzz ci on checkouts made from the installed vLLM: exit codes, baselines, JUnit/SARIF against their schemas.

Replay-only (``--fuzz-time 0``) on two corpus files, so each call is a few seconds; the fuzzing phase is
``gdnfuzz run``'s supervisor, exercised by its own tests and measured in the issue's closing note.
"""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import xmlschema
from checkout_fixtures import SCHEDULER, make_checkout, replace_split
from test_issue_filing import TOKEN, server  # noqa: F401  (the loopback GitHub fixture)

from fuzz import HOMEPAGE
from fuzz.cli import main
from fuzz.model.policies import resolve_policy
from fuzz.report.ci_report import CiReport, mark_new
from fuzz.report.junit import render_junit
from fuzz.report.sarif import render_sarif
from fuzz.report.summary import render_summary
from fuzz.triage.ci import CiPaths, prepare_fuzz_corpus

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = Path(__file__).parent / "data" / "schemas"
FILES = ("pr51113-concurrent-prefills.json", "pr51113-resume-at-331-nopartial.json")
SIG = "split-runs-past-to-budget"  # pre-51113 takes all it is offered where vLLM's split stops or defers


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("checkouts")
    pre, current = make_checkout(base / "pre51113"), make_checkout(base / "current")
    replace_split(pre)
    return {"pre": pre, "current": current}


@pytest.fixture
def corpus(tmp_path) -> Path:
    (tmp_path / "corpus" / "regressions").mkdir(parents=True)
    for name in FILES:
        shutil.copyfile(ROOT / "corpus" / "regressions" / name, tmp_path / "corpus" / "regressions" / name)
    return tmp_path / "corpus"


def _ci(corpus: Path, candidate: Path | str, out: Path, *extra: str) -> int:
    return main(["ci", "--candidate", str(candidate), "--corpus", str(corpus), "--fuzz-time", "0", "--out", str(out),
                 *extra])


def test_pre_51113_checkout_fails_with_one_new_signature_then_passes_with_it_in_the_baseline(
        tmp_path, corpus, checkouts, capsys):
    out = tmp_path / "out"
    assert _ci(corpus, checkouts["pre"], out) == 1
    sarif = json.loads((out / "gdnfuzz.sarif").read_text())
    jsonschema.validate(sarif, json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text()))
    xmlschema.XMLSchema(SCHEMAS / "JUnit.xsd").validate(out / "junit.xml")
    [result] = sarif["runs"][0]["results"]
    assert result["ruleId"] == SIG and result["baselineState"] == "new"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == SCHEDULER  # relative to the checkout
    assert "def _mamba_block_aligned_split" in (checkouts["pre"] / SCHEDULER).read_text().splitlines()[
        location["region"]["startLine"] - 1]
    failures = ET.parse(out / "junit.xml").getroot().findall(".//failure")
    assert len(failures) == 1 and "gdnfuzz replay" in failures[0].text
    names = [c.get("name") for c in ET.parse(out / "junit.xml").getroot().iter("testcase")]
    assert names == [f"corpus/regressions/{n}" for n in FILES] + ["fuzzing"]  # wherever the corpus is installed
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**gdnfuzz: FAILED**: 1 new signature") and SIG in summary

    baseline = tmp_path / "known.txt"
    baseline.write_text(f"# tracked upstream\n{SIG}\n")
    assert _ci(corpus, checkouts["pre"], tmp_path / "out2", "--baseline", str(baseline)) == 0
    xmlschema.XMLSchema(SCHEMAS / "JUnit.xsd").validate(tmp_path / "out2" / "junit.xml")
    [known] = json.loads((tmp_path / "out2" / "gdnfuzz.sarif").read_text())["runs"][0]["results"]
    assert known["baselineState"] == "unchanged" and known["level"] == "note"


def test_a_fuzzing_step_that_ran_no_input_is_an_error_in_every_report_never_a_pass():
    vllm = resolve_policy("vllm")
    report = mark_new(CiReport(vllm, vllm, [], set(), "no baseline", fuzz_asked=20.0,
                               fuzz_startup="importing vLLM's scheduling code 19.5s"))
    junit = render_junit(report)
    xmlschema.XMLSchema(SCHEMAS / "JUnit.xsd").validate(junit)
    fuzzing = ET.fromstring(junit).find("testsuite[@name='gdnfuzz.fuzz']")
    [case] = fuzzing.findall("testcase")
    assert case.get("name") == "fuzzing" and case.find("error").get("type") == "gdnfuzz.no-input"
    assert fuzzing.get("errors") == "1"
    summary = render_summary(report, ROOT)
    assert summary.startswith("**gdnfuzz: ERROR**: not everything was judged: the fuzzing step ran no input "
                              "(start-up: importing vLLM's scheduling code 19.5s)")
    sarif = json.loads(render_sarif(report, ROOT, "0"))
    jsonschema.validate(sarif, json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text()))
    assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert sarif["runs"][0]["tool"]["driver"]["informationUri"] == HOMEPAGE
    report.fuzz_execs, report.fuzz_seconds = 545, 20.0  # the same step with inputs: a pass of the same name
    fuzzing = ET.fromstring(render_junit(report)).find("testsuite[@name='gdnfuzz.fuzz']")
    assert [c.get("name") for c in fuzzing.findall("testcase")] == ["fuzzing"] and len(fuzzing.find("testcase")) == 0
    assert "545 inputs" in fuzzing.find("system-out").text
    assert render_summary(report, ROOT).startswith("**gdnfuzz: passed**")


def test_ci_outside_a_vllm_checkout_is_a_usage_error_saying_where_to_run_it(tmp_path, corpus, capsys):
    assert main(["ci", "--corpus", str(corpus), "--checkout", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"--checkout {tmp_path}: not a vLLM checkout" in line and "run `gdnfuzz ci` in the pull request's" in line
    assert not (tmp_path / "out").exists()


def test_current_split_checkout_passes_and_writes_only_under_out(tmp_path, corpus, checkouts):
    before = sorted(p.relative_to(corpus) for p in corpus.rglob("*"))
    assert _ci(corpus, checkouts["current"], tmp_path / "out") == 0
    assert sorted(p.relative_to(corpus) for p in corpus.rglob("*")) == before
    assert (tmp_path / "out" / "summary.md").read_text().startswith("**gdnfuzz: passed**")
    assert json.loads((tmp_path / "out" / "gdnfuzz.sarif").read_text())["runs"][0]["results"] == []


def test_open_issues_are_the_baseline(tmp_path, corpus, checkouts, server, monkeypatch):  # noqa: F811
    server.issues.append({"number": 1, "state": "open", "title": f"gdnfuzz {SIG}: a poisoned slot", "body": "",
                          "labels": ["gdnfuzz"]})
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", server.base)
    assert _ci(corpus, checkouts["pre"], tmp_path / "out", "--baseline-issues", server.repo) == 0
    assert any(path.endswith("/issues") for _, path, _ in server.requests)


@pytest.mark.parametrize("extra, message", [
    (("--baseline", "missing.txt"), "missing.txt: baseline: cannot be read"),
    (("--candidate-mode", "branch", "--candidate", "pre-51113"), "is not a vLLM checkout directory"),
])
def test_bad_input_is_exit_2_naming_it(tmp_path, corpus, checkouts, capsys, extra, message):
    assert _ci(corpus, checkouts["pre"], tmp_path / "out", *extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_malformed_baseline_line_names_file_and_line(tmp_path, corpus, checkouts, capsys):
    bad = tmp_path / "known.txt"
    bad.write_text("poison-x\nnot a signature\n")
    assert _ci(corpus, checkouts["pre"], tmp_path / "out", "--baseline", str(bad)) == 2
    assert f"{bad}: line 2:" in capsys.readouterr().err


@pytest.mark.parametrize("fault", ["500", "garbage", "unreachable"])
def test_open_issues_that_cannot_be_read_are_exit_5_with_every_report_written(
        tmp_path, corpus, checkouts, server, monkeypatch, capsys, fault):  # noqa: F811
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GDNFUZZ_GITHUB_MAX_WAIT", "1")
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9" if fault == "unreachable" else server.base)
    if fault != "unreachable":
        server.misbehave("GET", "/repos/octo/vllm/issues", fault, times=100)
    out = tmp_path / "out"
    assert _ci(corpus, checkouts["pre"], out, "--baseline-issues", server.repo) == 5
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**gdnfuzz: ERROR**: the baseline could not be read, so 1 signature outside")
    assert "The baseline could not be read: open issues of octo/vllm: GitHub API at" in summary
    xmlschema.XMLSchema(SCHEMAS / "JUnit.xsd").validate(out / "junit.xml")
    [error] = ET.parse(out / "junit.xml").getroot().findall(".//error")
    assert f"signature {SIG} could not be checked" in error.get("message")
    sarif = json.loads((out / "gdnfuzz.sarif").read_text())
    jsonschema.validate(sarif, json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text()))
    assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False
    assert TOKEN not in summary + capsys.readouterr().err


def test_open_issues_that_cannot_be_read_do_not_fail_a_run_that_found_nothing(
        tmp_path, corpus, checkouts, server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", server.base)
    server.misbehave("GET", "/repos/octo/vllm/issues", "garbage")
    out = tmp_path / "out"
    assert _ci(corpus, checkouts["current"], out, "--baseline-issues", server.repo) == 0
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**gdnfuzz: passed**") and "The baseline could not be read" in summary


def test_a_fifo_in_the_corpus_is_skipped_with_a_note_and_never_copied(tmp_path, corpus, checkouts, capsys):
    fifo = corpus / "regressions" / "zz.json"
    os.mkfifo(fifo)
    assert _ci(corpus, checkouts["current"], tmp_path / "out") == 0
    assert f"gdnfuzz ci: skipped {fifo}: not a regular file (a FIFO)" in capsys.readouterr().err
    prepare_fuzz_corpus(corpus, CiPaths.under(tmp_path / "out"))  # what the fuzzing phase starts from
    assert sorted(p.name for p in (tmp_path / "out" / "corpus" / "regressions").iterdir()) == sorted(FILES)


def test_the_fuzzing_line_says_what_each_profile_of_the_mixture_ran():
    vllm = resolve_policy("vllm")
    profiles = {"prefill": {"execs": 900, "seconds": 40.2, "features": 10, "findings": 0, "share": 0.3},
                "chat": {"execs": 60, "seconds": 30.0, "features": 5, "findings": 1, "share": 0.25}}
    report = CiReport(vllm, vllm, [], set(), "no baseline", fuzz_asked=60.0, fuzz_seconds=60.0, fuzz_execs=960,
                      fuzz_profiles=profiles)
    assert report.fuzz_figures().endswith("; inputs per profile: prefill 900 (40s), chat 60 (30s)")
