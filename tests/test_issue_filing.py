"""gdnfuzz file-issue against a GitHub API server on loopback (real HTTP, in-memory state: github_server)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bundle_fixtures import write_bundle
from github_server import TOKEN, FakeGitHub, serving

from fuzz.cli import main
from fuzz.errors import ExitCode
from fuzz.report.github import file_issue
from fuzz.report.issue import issue_title, regression_snippet, title_names
from fuzz.store.bundle import BundleError, load_bundle

SIG = "poisoned-slot.eagle.unaligned-resume.3f9a"


@pytest.fixture
def server() -> Iterator[FakeGitHub]:
    with serving() as fake:
        yield fake


def _cli(argv: list[str]) -> int:
    return main(argv)


def _all_text(root: Path) -> str:
    return "".join(p.read_text() for p in root.rglob("*") if p.is_file())


def test_filing_twice_opens_one_issue_and_one_comment(tmp_path, server, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    bundle = write_bundle(tmp_path / "crashes", SIG)
    argv = ["file-issue", str(bundle), "--repo", "octo/vllm", "--api-url", server.base]
    assert _cli(argv) == 0
    assert _cli(argv) == 0
    assert len(server.issues) == 1 and len(server.comments) == 1
    issue = server.issues[0]
    assert SIG in issue["title"] and issue["labels"] == ["gdnfuzz"]
    assert server.comments[0]["issue"] == issue["number"]
    assert "slot hashed as state@1600 holds state@364" in issue["body"]
    assert "0.32.0" in issue["body"] and "2.13.0+cpu" in issue["body"]
    assert f"gdnfuzz replay crashes/{SIG}/scenario.json --candidate pre-51113 --reference vllm" in issue["body"]
    assert '"gdnfuzz_scenario": 1' in issue["body"] and "def test_gdnfuzz_" in issue["body"]
    assert {a for _, _, a in server.requests} == {f"token {TOKEN}"}
    record = json.loads((bundle / "issue.json").read_text())
    assert record["action"] == "commented" and record["number"] == 1
    out = capsys.readouterr()
    assert "opened octo/vllm#1" in out.out and "commented octo/vllm#1" in out.out
    assert TOKEN not in out.out + out.err + caplog.text + _all_text(tmp_path)


def test_other_signatures_get_their_own_issue(tmp_path, server, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    crashes = tmp_path / "crashes"
    assert file_issue(write_bundle(crashes, SIG), "octo/vllm", False, server.base).action == "opened"
    longer = write_bundle(crashes, SIG + "-b", summary="slot hashed as state@3200 holds state@1600")
    assert file_issue(longer, "octo/vllm", False, server.base).action == "opened"
    assert file_issue(longer, "octo/vllm", False, server.base).action == "commented"
    assert [len(server.issues), len(server.comments)] == [2, 1]
    assert server.comments[0]["issue"] == 2


def test_unlabelled_open_issue_is_found_by_search(tmp_path, server, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    server.issues.append({"number": 1, "state": "open", "title": f"gdnfuzz {SIG}: seen", "body": "", "labels": []})
    result = file_issue(write_bundle(tmp_path / "crashes", SIG), "octo/vllm", False, server.base)
    assert result.action == "commented" and result.number == 1 and len(server.issues) == 1


def test_dry_run_sends_nothing_and_writes_issue_md(tmp_path, server, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    bundle = write_bundle(tmp_path / "crashes", SIG)
    assert _cli(["file-issue", str(bundle), "--repo", "octo/vllm", "--api-url", server.base, "--dry-run"]) == 0
    assert server.requests == []
    text = (bundle / "issue.md").read_text()
    assert text.startswith(f"# gdnfuzz {SIG}: ") and "## Regression test" in text
    out = capsys.readouterr()
    assert SIG in out.out and TOKEN not in out.out + out.err + text


def test_api_errors_are_reported_without_the_token(tmp_path, server, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    server.echo_token_in_errors = True
    bundle = write_bundle(tmp_path / "crashes", SIG)
    assert _cli(["file-issue", str(bundle), "--repo", "octo/vllm", "--api-url", server.base]) == ExitCode.INFRASTRUCTURE
    err = capsys.readouterr().err
    assert "HTTP 422" in err and "***" in err
    assert TOKEN not in err + caplog.text + _all_text(tmp_path)


def test_missing_token_is_a_usage_error(tmp_path, server, monkeypatch, capsys):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    bundle = write_bundle(tmp_path / "crashes", SIG)
    assert _cli(["file-issue", str(bundle), "--repo", "octo/vllm", "--api-url", server.base]) == 2
    assert "GITHUB_TOKEN is not set" in capsys.readouterr().err and server.requests == []


@pytest.mark.parametrize(
    "breakage, where",
    [
        (lambda b: (b / "report.md").unlink(), "report.md: <file>"),
        (lambda b: _edit(b / "verdict.json", confirmed="yes"), "verdict.json: confirmed"),
        (lambda b: _edit(b / "verdict.json", environment={"vllm": "0.32.0", "device": "cpu"}), "environment.torch"),
        (lambda b: _edit(b / "verdict.json", first_step="4"), "verdict.json: first_step"),
        (lambda b: _edit(b / "verdict.json", signature="other"), "verdict.json: signature"),
        (lambda b: _edit(b / "scenario.json", drop="expect"), "scenario.json: expect"),
        (lambda b: _edit(b / "original.json", requests=[]), "original.json: requests"),
    ],
)
def test_bad_bundles_name_file_and_field(tmp_path, capsys, breakage, where):
    bundle = write_bundle(tmp_path / "crashes", SIG)
    breakage(bundle)
    with pytest.raises(BundleError, match=where.replace(".", r"\.")):
        load_bundle(bundle)
    assert _cli(["file-issue", str(bundle), "--repo", "octo/vllm", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert where in err and len(err.strip().splitlines()) == 1


def _edit(path: Path, drop: str | None = None, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    data.pop(drop, None)
    path.write_text(json.dumps(data))


def test_regression_snippet_is_valid_python_that_names_the_policies(tmp_path):
    path = write_bundle(tmp_path / "crashes", SIG, tier="engine")
    note = "it's " + "'" * 3 + 'odd \\ "quoted"'
    _edit(path / "scenario.json", note=note)
    bundle = load_bundle(path)
    snippet = regression_snippet(bundle)
    namespace: dict[str, Any] = {}
    exec(compile(snippet, "snippet.py", "exec"), namespace)
    assert namespace["SCENARIO"]["expect"] == {"pre-51113": "diverged", "vllm": "clean"}
    assert namespace["SCENARIO"]["note"] == note
    assert "'--candidate', 'pre-51113'" in snippet and "'--tier', 'engine'" in snippet


def test_title_matching_is_whole_word():
    assert title_names(f"gdnfuzz {SIG}: x", SIG)
    assert not title_names(f"gdnfuzz {SIG}-b: x", SIG)
    assert not title_names(f"gdnfuzz x{SIG}: x", SIG)
    assert not title_names(f"gdnfuzz {SIG}.b: x", SIG)
    assert title_names(f"seen again ({SIG}).", SIG)


def test_long_summaries_keep_the_signature_in_the_title(tmp_path):
    bundle = load_bundle(write_bundle(tmp_path / "crashes", SIG, summary="x" * 400))
    title = issue_title(bundle)
    assert len(title) <= 256 and title_names(title, SIG)
