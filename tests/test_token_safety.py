"""The GitHub token (issue 15, item 9): never sent in cleartext off the machine, never printed or saved.

Against the loopback server of ``github_server``: a plain ``http://`` API URL is refused unless it is
loopback, before anything is sent; a server that echoes the token back in its successful answers
gets it redacted from everything gdnfuzz prints, logs and writes.
"""

from __future__ import annotations

import json
import logging

import pytest
from bundle_fixtures import write_bundle
from github_server import TOKEN, serving

from fuzz.cli import main

SIG = "poisoned-slot.eagle.unaligned-resume.3f9a"


@pytest.mark.parametrize("url", ["http://api.github.example", "http://10.0.0.7:8080", "http://[2001:db8::1]/api"])
def test_a_plain_http_api_url_off_loopback_is_refused_before_anything_is_sent(tmp_path, monkeypatch, capsys, url):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    bundle = write_bundle(tmp_path / "crashes", SIG)
    with serving() as server:
        assert main(["file-issue", str(bundle), "--repo", "octo/vllm", "--api-url", url]) == 2
        assert server.requests == []
    err = capsys.readouterr().err
    assert "--api-url" in err and "https://" in err and len(err.strip().splitlines()) == 1
    assert TOKEN not in err and not (bundle / "issue.json").exists()


def test_a_token_echoed_in_successful_answers_is_redacted_everywhere(tmp_path, monkeypatch, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    bundle = write_bundle(tmp_path / "crashes", SIG)
    with serving() as server:
        server.echo_token_in_urls = True
        argv = ["file-issue", str(bundle), "--repo", "octo/vllm", "--api-url", server.base]
        assert main(argv) == 0 and main(argv) == 0  # opened, then commented: both answers carry the token
        assert len(server.issues) == 1 and len(server.comments) == 1
    out = capsys.readouterr()
    record = (bundle / "issue.json").read_text()
    assert json.loads(record)["action"] == "commented"
    written = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert TOKEN not in out.out + out.err + caplog.text + written
    assert "***" in record
