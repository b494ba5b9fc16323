"""A GitHub REST API server on loopback (real HTTP, state in memory) for the issue tests.

It serves the endpoints gdnfuzz uses over one repository: the repository, issue listing (by state
``open`` / ``closed`` / ``all`` and labels), one issue, issue search, creating an issue, editing one
(``PATCH``: close and reopen), and comments. ``requests`` records every request, so a test can count
what a second run sent.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "ghp_testtoken0123456789abcdefSECRET"


class FakeGitHub:
    """The few endpoints gdnfuzz uses, over one repository, state in memory."""

    def __init__(self, repo: str, echo_token_in_errors: bool = False):
        self.repo = repo
        self.issues: list[dict[str, Any]] = []
        self.comments: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Authorization header
        self.echo_token_in_errors = echo_token_in_errors
        self.echo_token_in_urls = False  # a hostile or broken server: the credential in every html_url
        self.base = ""

    def add_issue(self, title: str, state: str = "open", labels: tuple[str, ...] = ("gdnfuzz",)) -> dict[str, Any]:
        issue = {"number": len(self.issues) + 1, "state": state, "title": title, "body": "", "labels": list(labels)}
        self.issues.append(issue)
        return issue

    def writes(self) -> list[tuple[str, str]]:
        """The requests that changed something (POST, PATCH), in order."""
        return [(m, p) for m, p, _ in self.requests if m in ("POST", "PATCH")]

    def issue_json(self, issue: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base}/repos/{self.repo}/issues/{issue['number']}"
        return {
            "id": issue["number"],
            "number": issue["number"],
            "title": issue["title"],
            "body": issue["body"],
            "state": issue["state"],
            "state_reason": issue.get("state_reason"),
            "labels": [{"name": n, "url": f"{self.base}/repos/{self.repo}/labels/{n}"} for n in issue["labels"]],
            "url": url,
            "html_url": f"https://github.invalid/{self.repo}/issues/{issue['number']}{self._echo()}",
            "comments": sum(c["issue"] == issue["number"] for c in self.comments),
        }

    def _echo(self) -> str:
        return f"?seen={TOKEN}" if self.echo_token_in_urls else ""

    def _issue(self, path: str, repo_path: str) -> dict[str, Any] | None:
        tail = path.removeprefix(f"{repo_path}/issues/")
        if not tail.isdigit():
            return None
        return next((i for i in self.issues if i["number"] == int(tail)), None)

    def handle(self, method: str, raw_path: str, auth: str | None, body: Any) -> tuple[int, Any]:
        path, _, query = raw_path.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        self.requests.append((method, path, auth))
        if self.echo_token_in_errors:
            return 422, {"message": f"Validation Failed for {auth}"}
        if auth not in (f"token {TOKEN}", f"Bearer {TOKEN}"):
            return 401, {"message": "Bad credentials"}
        repo_path = f"/repos/{self.repo}"
        if method == "GET" and path == repo_path:
            owner, name = self.repo.split("/")
            return 200, {
                "id": 1,
                "name": name,
                "full_name": self.repo,
                "owner": {"login": owner},
                "url": f"{self.base}{repo_path}",
            }
        if method == "GET" and path == f"{repo_path}/issues":
            wanted = set(filter(None, params.get("labels", "").split(",")))
            state = params.get("state", "open")
            found = [i for i in self.issues if state in ("all", i["state"]) and wanted <= set(i["labels"])]
            return 200, [self.issue_json(i) for i in found]
        if method in ("GET", "PATCH") and path.startswith(f"{repo_path}/issues/"):
            issue = self._issue(path, repo_path)
            if issue is not None:
                if method == "PATCH":
                    issue.update({k: v for k, v in body.items() if k in ("state", "state_reason", "title", "body")})
                return 200, self.issue_json(issue)
        if method == "GET" and path == "/search/issues":
            phrase = params["q"].split('"')[1]
            found = [i for i in self.issues if i["state"] == "open" and phrase in i["title"]]
            return 200, {
                "total_count": len(found),
                "incomplete_results": False,
                "items": [self.issue_json(i) for i in found],
            }
        if method == "POST" and path == f"{repo_path}/issues":
            issue = {"number": len(self.issues) + 1, "state": "open", **body, "labels": body.get("labels", [])}
            self.issues.append(issue)
            return 201, self.issue_json(issue)
        if method == "POST" and path.startswith(f"{repo_path}/issues/") and path.endswith("/comments"):
            number = int(path.split("/")[-2])
            comment = {"id": len(self.comments) + 1, "issue": number, "body": body["body"]}
            self.comments.append(comment)
            return 201, {
                "id": comment["id"],
                "body": comment["body"],
                "url": f"{self.base}{repo_path}/issues/comments/{comment['id']}",
                "html_url": f"https://github.invalid/{self.repo}/issues/{number}#issuecomment-{comment['id']}"
                            f"{self._echo()}",
            }
        return 404, {"message": "Not Found"}


@contextmanager
def serving() -> Iterator[FakeGitHub]:
    """A FakeGitHub for ``octo/vllm`` served on 127.0.0.1 for as long as the context lasts."""
    fake = FakeGitHub("octo/vllm")

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, payload = fake.handle(self.command, self.path, self.headers.get("Authorization"), body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
