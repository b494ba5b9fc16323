"""gdnfuzz verify-fixed: real findings replayed against a candidate, issues closed and reopened on a GitHub
API server on loopback (real HTTP, ``github_server``), each at most once per candidate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bundle_fixtures import write_bundle
from github_server import TOKEN, FakeGitHub, serving
from lifecycle_fixtures import HISTORY, ROOT, real_bundle, vllm_history

from fuzz.cli import main
from fuzz.errors import ExitCode
from fuzz.oracle.finding import environment
from fuzz.report.github import file_issue
from fuzz.search.settings import RunSettings
from fuzz.store.bundle import load_bundle
from fuzz.triage.verify import classify
from workers.campaign.config import CampaignConfig
from workers.campaign.tasks import verify_fixed_task

VLLM = environment()["vllm"]
FLAKY = f"{ROOT / 'tests' / 'flaky_policy.py'}:flaky_split"


@pytest.fixture
def server(monkeypatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    with serving() as fake:
        yield fake


def _verify(bundle: Path, server: FakeGitHub, *more: str) -> int:
    return main(["verify-fixed", str(bundle), "--repo", "octo/vllm", "--api-url", server.base, *more])


def _state(bundle: Path) -> bytes:
    return b"".join((bundle / name).read_bytes() for name in ("verdict.json", "report.md"))


def test_an_open_issue_whose_finding_no_longer_reproduces_is_commented_on_and_closed_once(tmp_path, server, capsys):
    bundle = real_bundle(tmp_path / "crashes")
    assert file_issue(bundle, "octo/vllm", False, server.base).action == "opened"
    filed = len(server.writes())
    assert _verify(bundle, server) == 0  # the installed vLLM has the #51113 fix
    out = capsys.readouterr().out
    assert f"{bundle.name}: fixed (0/3 tries); issue octo/vllm#1: closed" in out
    assert server.issues[0]["state"] == "closed" and server.issues[0]["state_reason"] == "completed"
    issue_path = "/repos/octo/vllm/issues/1"
    assert server.writes()[filed:] == [("POST", f"{issue_path}/comments"), ("PATCH", issue_path)]  # one close
    comment = server.comments[-1]["body"]
    assert f"Checked: the installed vLLM {VLLM}; 0 of 3 tries reproduced; canary: caught: the naive split diverges" in comment
    assert f"| Fixed in | the installed vLLM {VLLM} |" in comment
    verdict = load_bundle(bundle).verdict
    record = verdict["verifications"][f"vllm {VLLM}"]
    assert (record["status"], record["issue"]["action"]) == ("fixed", "closed")
    assert verdict["fixed_in"]["candidate"] == f"the installed vLLM {VLLM}"
    assert verdict["reproducibility"] == {"tries": 3, "hits": 0, "candidate": f"the installed vLLM {VLLM}"}

    before, writes = _state(bundle), len(server.writes())
    assert _verify(bundle, server) == 0
    assert "[already verified against this candidate]" in capsys.readouterr().out
    assert _state(bundle) == before and len(server.writes()) == writes  # the second run changes nothing


def test_a_closed_issue_whose_finding_reproduces_again_is_reopened_once(tmp_path, server, capsys):
    bundle = real_bundle(tmp_path / "crashes")
    server.add_issue(f"gdnfuzz {bundle.name}: found long ago", state="closed")  # no issue.json: found by label
    assert _verify(bundle, server, "--candidate", "pre-51113") == 1
    out = capsys.readouterr().out
    assert f"{bundle.name}: reproduces (3/3 tries); issue octo/vllm#1: reopened" in out
    assert server.issues[0]["state"] == "open"
    assert server.writes() == [("PATCH", "/repos/octo/vllm/issues/1"), ("POST", "/repos/octo/vllm/issues/1/comments")]
    # the record's label is bundle data: shown inert, its backticks as characters (fuzz.report.inert)
    assert "reproduces again**, reopening. Checked: policy &#96;pre-51113&#96;; 3 of 3 tries" in \
        server.comments[0]["body"]

    before = _state(bundle)
    assert _verify(bundle, server, "--candidate", "pre-51113") == 1
    assert _state(bundle) == before and len(server.writes()) == 2  # reopened once, commented once


def test_a_flaky_finding_is_flaky_with_its_rate_never_fixed(tmp_path, server, capsys):
    bundle = real_bundle(tmp_path / "crashes")
    assert file_issue(bundle, "octo/vllm", False, server.base).action == "opened"
    assert _verify(bundle, server, "--candidate", FLAKY, "--tries", "4") == 1
    out = capsys.readouterr().out
    assert f"{bundle.name}: flaky (2/4 tries, rate 0.50): reproduced in 2 of 4 tries (50%)" in out
    verdict = load_bundle(bundle).verdict
    assert verdict["verifications"][FLAKY]["status"] == "flaky" and verdict.get("fixed_in") is None
    assert verdict["reproducibility"]["tries"] == 4 and verdict["reproducibility"]["hits"] == 2
    assert server.issues[0]["state"] == "open" and len(server.comments) == 0  # neither closed nor commented
    assert "**Reproducibility**: 2 of 4 tries against policy" in (bundle / "report.md").read_text()


def test_a_git_revision_is_a_candidate_read_from_git_objects(tmp_path, capsys):
    repo = tmp_path / "vllm"
    sha = vllm_history(repo)
    crashes = tmp_path / "crashes"
    bundle = real_bundle(crashes)
    argv = ["verify-fixed", str(crashes), "--checkout", str(repo), "--tries", "1"]
    assert main([*argv, "--revision", sha["E"]]) == 1
    assert main([*argv, "--revision", "main"]) == 0
    out = capsys.readouterr().out
    assert f"against {repo} at {sha['J'][:12]} ({dict(HISTORY)['J']}), split mode" in out
    verdict = load_bundle(bundle).verdict
    assert set(verdict["verifications"]) == {f"split@{sha['E']}", f"split@{sha['J']}"}
    assert verdict["fixed_in"]["revision"] == sha["J"]
    assert main([*argv, "--revision", sha["D"]]) == 2  # its split does not parse: bad input, one line
    assert "syntax error" in capsys.readouterr().err


def test_the_campaign_task_verifies_once_per_installed_vllm(tmp_path):
    crashes = tmp_path / "crashes"
    bundle = real_bundle(crashes)
    config = CampaignConfig(RunSettings(corpus=tmp_path / "corpus", crashes=crashes), verify_fixed=True, verify_tries=1)
    assert verify_fixed_task(config) == [f"{bundle.name}: fixed (0/1 tries)"]
    assert verify_fixed_task(config) == [f"{bundle.name}: fixed (0/1 tries) [already verified against this candidate]"]
    assert json.loads((bundle / "verdict.json").read_text())["verifications"][f"vllm {VLLM}"]["tries"] == 1


def test_fixed_needs_every_try_decided_and_the_canary_caught():
    assert classify(3, 3, [], None) == ("reproduces", "")
    assert classify(4, 1, [], True)[0] == "flaky"
    assert classify(3, 0, [], True) == ("fixed", "")
    assert classify(3, 0, [], None) == ("fixed", "")  # exact states (sim): a wrong slot cannot look right
    status, why = classify(3, 0, [], False)
    assert status == "unverifiable" and "canary" in why
    assert classify(3, 0, ["try 2: inconclusive: the engine crashed"], True) == (
        "unverifiable", "try 2: inconclusive: the engine crashed")


def test_a_scenario_that_would_not_show_a_wrong_slot_is_never_fixed(tmp_path, capsys):
    """No cached slot is ever read (one request, a prompt shorter than B): the naive split does not
    diverge there either, so "does not reproduce" proves nothing: unverifiable, not fixed."""
    policy = tmp_path / "over.py"
    policy.write_text("def split(self, request, num_new_tokens, a=0, b=0):\n    return num_new_tokens + 1\n")
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"gdnfuzz_scenario": 1, "engine": {"mamba_block_size": 1600},
                                 "requests": [{"id": "a", "prompt": [100], "max_tokens": 2}]}))
    bundle = real_bundle(tmp_path / "crashes", candidate=f"{policy}:split", scenario_file=short)
    assert main(["verify-fixed", str(bundle), "--tries", "1"]) == 0
    record = json.loads((bundle / "verdict.json").read_text())["verifications"][f"vllm {VLLM}"]
    assert record["status"] == "unverifiable" and record["canary"].startswith("missed")
    assert "0 fixed, 0 flaky, 1 unverifiable" in capsys.readouterr().out


@pytest.mark.parametrize("reason, labels", [("not_planned", ("gdnfuzz",)), ("completed", ("gdnfuzz", "Won't Fix"))])
def test_an_issue_a_person_closed_for_good_is_never_reopened(tmp_path, server, capsys, reason, labels):
    bundle = real_bundle(tmp_path / "crashes")
    server.add_issue(f"gdnfuzz {bundle.name}: found long ago", state="closed", labels=labels, state_reason=reason)
    for candidate in ("pre-51113", "naive"):  # it reproduces under both: neither reopens it
        assert _verify(bundle, server, "--candidate", candidate, "--tries", "1") == 1
    out = capsys.readouterr().out
    why = "closed as not planned" if reason == "not_planned" else "labelled \"Won't Fix\""
    assert out.count(f"issue octo/vllm#1: left closed ({why})") == 2
    assert server.writes() == [] and server.issues[0]["state"] == "closed"
    assert load_bundle(bundle).verdict["verifications"]["naive"]["issue"]["action"] == "left closed"


def test_a_recorded_issue_that_is_gone_is_one_line_and_the_next_bundle_goes_on(tmp_path, server, capsys):
    crashes = tmp_path / "crashes"
    gone = real_bundle(crashes, candidate="naive")  # sorts first
    kept = real_bundle(crashes)
    (gone / "issue.json").write_text(json.dumps({"repo": "octo/vllm", "number": 7, "url": None, "action": "opened"}))
    assert file_issue(kept, "octo/vllm", False, server.base).number == 1
    server.misbehave("PATCH", "/repos/octo/vllm/issues/1", "500-after")  # closed, the answer lost
    argv = ["verify-fixed", str(crashes), "--repo", "octo/vllm", "--api-url", server.base, "--tries", "1"]
    assert main(argv) == ExitCode.INFRASTRUCTURE  # nothing reproduces, one issue could not be brought in line
    out = capsys.readouterr().out
    assert f"{gone.name}: fixed (0/1 tries); issue not brought in line (tried again next run): GitHub API at " in out
    assert "read issue #7 (recorded in" in out and "HTTP 404" in out
    assert f"{kept.name}: fixed (0/1 tries); issue octo/vllm#1: closed" in out
    assert server.issues[0]["state"] == "closed" and server.writes().count(("PATCH", "/repos/octo/vllm/issues/1")) == 1
    assert "2 fixed, 0 flaky, 0 unverifiable, 0 not verified, 1 issue not brought in line" in out

    writes = len(server.writes())
    assert main(argv) == ExitCode.INFRASTRUCTURE  # the gone one is tried again, the other changes nothing
    out = capsys.readouterr().out
    assert f"{gone.name}: fixed (0/1 tries) [already verified against this candidate]; issue not brought" in out
    assert f"{kept.name}: fixed (0/1 tries) [already verified against this candidate]; issue octo/vllm#1: " \
           "closed earlier (nothing sent)" in out
    assert len(server.writes()) == writes


def test_an_oversized_bundle_that_sorts_first_is_one_line_and_the_rest_are_verified(tmp_path, capsys):
    crashes = tmp_path / "crashes"
    big = write_bundle(crashes, "aaa-oversized")
    with open(big / "original.json", "r+b") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte on paper
    good = real_bundle(crashes)
    assert main(["verify-fixed", str(crashes), "--tries", "1"]) == ExitCode.BAD_INPUT  # nothing reproduces
    out = capsys.readouterr().out
    assert f"aaa-oversized: not verified: {big / 'original.json'}: <file>: larger than" in out
    assert f"{good.name}: fixed (0/1 tries)" in out and "1 fixed, 0 flaky, 0 unverifiable, 1 not verified" in out


def test_json_is_one_object_per_bundle_then_the_totals(tmp_path, capsys):
    crashes = tmp_path / "crashes"
    bundle = real_bundle(crashes)
    assert main(["verify-fixed", str(crashes), "--candidate", "pre-51113", "--tries", "1", "--json"]) == 1
    first, last = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (first["bundle"], first["record"]["status"], first["failures"]) == (str(bundle), "reproduces", [])
    assert last["summary"]["reproduces"] == 1 and last["summary"]["not verified"] == 0
