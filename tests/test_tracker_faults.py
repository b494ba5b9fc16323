"""gdnfuzz file-issue against a GitHub API that misbehaves (``github_server``'s faults, real HTTP on loopback):
a write whose answer is lost is never sent twice, waits are bounded, every failure is one line and exit 5."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from bundle_fixtures import write_bundle
from github_server import TOKEN, FakeGitHub, serving

from fuzz.cli import main
from fuzz.errors import ExitCode
from fuzz.report.github_client import MAX_WAIT_ENV, TIMEOUT_ENV, Session

SIG = "poisoned-slot.eagle.unaligned-resume.3f9a"
ISSUES = "/repos/octo/vllm/issues"


@pytest.fixture
def server(monkeypatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    with serving() as fake:
        yield fake


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """Every wait a client session sleeps, in order (it still sleeps them)."""
    slept: list[float] = []
    made = Session.__init__

    def recording(self, *args, **kwargs):
        made(self, *args, **kwargs)
        sleep = self._sleep
        self._sleep = lambda seconds: (slept.append(seconds), sleep(seconds))[1]

    monkeypatch.setattr(Session, "__init__", recording)
    return slept


def _file(tmp_path, server: FakeGitHub, api_url: str | None = None) -> int:
    bundle = write_bundle(tmp_path / "crashes", SIG)
    return main(["file-issue", str(bundle), "--repo", "octo/vllm", "--api-url", api_url or server.base])


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and TOKEN not in err, err
    return err


def test_an_issue_made_before_its_post_was_answered_500_is_opened_once(tmp_path, server):
    server.misbehave("POST", ISSUES, "500-after")
    assert _file(tmp_path, server) == 0
    assert len(server.issues) == 1 and server.writes() == [("POST", ISSUES)]  # looked up, not sent again
    record = json.loads((tmp_path / "crashes" / SIG / "issue.json").read_text())
    assert (record["action"], record["number"]) == ("opened", 1)
    assert f"<!-- gdnfuzz-signature: {SIG} -->" in server.issues[0]["body"]


def test_a_comment_made_before_its_post_was_answered_500_is_made_once(tmp_path, server):
    server.add_issue(f"gdnfuzz {SIG}: seen before")
    server.misbehave("POST", rf"{ISSUES}/1/comments", "500-after")
    assert _file(tmp_path, server) == 0
    assert len(server.comments) == 1 and server.writes() == [("POST", f"{ISSUES}/1/comments")]


def test_a_post_that_failed_before_anything_was_made_is_sent_again(tmp_path, server):
    server.misbehave("POST", ISSUES, "500")
    assert _file(tmp_path, server) == 0
    assert len(server.issues) == 1 and server.writes() == [("POST", ISSUES), ("POST", ISSUES)]


def test_a_short_retry_after_is_honoured(tmp_path, server, waits):
    server.misbehave("GET", "/repos/octo/vllm", "retry-after", seconds=1)
    assert _file(tmp_path, server) == 0 and len(server.issues) == 1
    assert waits == [1]  # exactly what the server asked, once


@pytest.mark.parametrize("kind", ["retry-after", "rate-limit"])
def test_a_wait_beyond_the_limit_is_reported_at_once(tmp_path, server, capsys, waits, kind):
    server.misbehave("GET", "/repos/octo/vllm", kind, times=100, seconds=3600)
    assert _file(tmp_path, server) == ExitCode.INFRASTRUCTURE and server.issues == []
    assert waits == [] and len(server.requests) == 1  # not a second slept, not a request more
    err = _one_line_error(capsys)
    assert "HTTP 403" in err and "beyond the 60s a call may wait" in err and MAX_WAIT_ENV in err
    assert not (tmp_path / "crashes" / SIG / "issue.json").exists()


def test_a_slow_server_is_given_up_on_within_the_limit(tmp_path, server, capsys, monkeypatch, waits):
    monkeypatch.setenv(TIMEOUT_ENV, "1")
    monkeypatch.setenv(MAX_WAIT_ENV, "2")
    server.misbehave("GET", "/repos/octo/vllm", "slow", times=100, seconds=5)
    assert _file(tmp_path, server) == ExitCode.INFRASTRUCTURE
    assert sum(waits) <= 2  # the waits between tries fit the limit
    assert "ReadTimeout" in _one_line_error(capsys) and len(server.requests) == 2


def test_an_answer_that_is_not_json_is_one_line_exit_5_never_tried_again(tmp_path, server, capsys):
    server.misbehave("GET", ISSUES, "garbage", times=100)
    assert _file(tmp_path, server) == ExitCode.INFRASTRUCTURE
    assert "not the GitHub API's" in _one_line_error(capsys)
    assert [p for _, p, _ in server.requests].count(ISSUES) == 1 and server.issues == []


def test_an_unreachable_api_is_exit_5_within_the_limit(tmp_path, server, capsys, monkeypatch, waits):
    monkeypatch.setenv(MAX_WAIT_ENV, "1")
    assert _file(tmp_path, server, "http://127.0.0.1:9") == ExitCode.INFRASTRUCTURE  # the discard port
    assert sum(waits) <= 1
    assert "ConnectionError" in _one_line_error(capsys)


@pytest.mark.parametrize("value", ["soon", "-1", "1e9"])
def test_a_bad_wait_limit_is_bad_input(tmp_path, server, capsys, monkeypatch, value):
    monkeypatch.setenv(MAX_WAIT_ENV, value)
    assert _file(tmp_path, server) == ExitCode.BAD_INPUT and server.requests == []
    assert MAX_WAIT_ENV in _one_line_error(capsys)
