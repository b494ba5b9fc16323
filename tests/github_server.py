"""A GitHub REST API server on loopback (real HTTP, state in memory) for the issue tests.

It serves the endpoints gdnfuzz uses over one repository: the repository, issue listing (by state
``open`` / ``closed`` / ``all``, labels and ``since``), one issue, issue search, creating an issue,
editing one (``PATCH``: close and reopen), and an issue's comments (listing and creating). ``requests``
records every request, so a test can count what a second run sent.

It can misbehave the ways a real tracker does (:meth:`FakeGitHub.misbehave`): a 500 after the write
was done (or before), a 403 with ``Retry-After``, a primary rate limit (``X-RateLimit-Remaining: 0``
and ``X-RateLimit-Reset``), a slow answer, a body that is not JSON, a 404 for an issue it holds. It
listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "ghp_testtoken0123456789abcdefSECRET"
FAULTS = ("500-after", "500", "retry-after", "rate-limit", "slow", "garbage", "404")


@dataclass
class Fault:
    """The next ``times`` requests whose method is ``method`` and whose path matches ``path`` (a regex, whole
    path) get ``kind`` (one of :data:`FAULTS`); ``seconds`` is the Retry-After, the rate-limit reset or the
    delay."""

    method: str
    path: str
    kind: str
    times: int = 1
    seconds: float = 0.0


@dataclass
class Reply:
    status: int
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # sent as is instead of the payload's JSON


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeGitHub:
    """The few endpoints gdnfuzz uses, over one repository, state in memory."""

    def __init__(self, repo: str, echo_token_in_errors: bool = False):
        self.repo = repo
        self.issues: list[dict[str, Any]] = []
        self.comments: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Authorization header
        self.times: list[float] = []  # when each request arrived (time.monotonic)
        self.faults: list[Fault] = []
        self.echo_token_in_errors = echo_token_in_errors
        self.echo_token_in_urls = False  # a hostile or broken server: the credential in every html_url
        self.base = ""
        self._lock = threading.Lock()

    def add_issue(self, title: str, state: str = "open", labels: tuple[str, ...] = ("gdnfuzz",),
                  state_reason: str | None = None) -> dict[str, Any]:
        issue = {"number": len(self.issues) + 1, "state": state, "title": title, "body": "", "labels": list(labels),
                 "state_reason": state_reason, "updated_at": _now()}
        self.issues.append(issue)
        return issue

    def misbehave(self, method: str, path: str, kind: str, times: int = 1, seconds: float = 0.0) -> None:
        """Answer the next ``times`` matching requests with ``kind`` (see :class:`Fault`)."""
        assert kind in FAULTS, kind
        self.faults.append(Fault(method, path, kind, times, seconds))

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
            "updated_at": issue.get("updated_at") or _now(),
        }

    def comment_json(self, comment: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": comment["id"],
            "body": comment["body"],
            "url": f"{self.base}/repos/{self.repo}/issues/comments/{comment['id']}",
            "html_url": f"https://github.invalid/{self.repo}/issues/{comment['issue']}#issuecomment-{comment['id']}"
                        f"{self._echo()}",
            "created_at": comment["created_at"],
            "updated_at": comment["created_at"],
        }

    def _echo(self) -> str:
        return f"?seen={TOKEN}" if self.echo_token_in_urls else ""

    def _issue(self, number: str) -> dict[str, Any] | None:
        return next((i for i in self.issues if str(i["number"]) == number), None)

    def _fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and re.fullmatch(fault.path, path):
                fault.times -= 1
                return fault
        return None

    def handle(self, method: str, raw_path: str, auth: str | None, body: Any) -> Reply:
        path, _, query = raw_path.partition("?")
        with self._lock:
            self.requests.append((method, path, auth))
            self.times.append(time.monotonic())
            fault = self._fault(method, path)
        if fault is None or fault.kind in ("slow", "500-after"):
            if fault is not None and fault.kind == "slow":
                time.sleep(fault.seconds)
            with self._lock:
                reply = self._serve(method, path, dict(urllib.parse.parse_qsl(query)), auth, body)
            if fault is None or fault.kind == "slow":
                return reply
            return Reply(500, {"message": "Server Error"})  # the write was done, the answer lost
        if fault.kind == "500":
            return Reply(500, {"message": "Server Error"})
        if fault.kind == "retry-after":
            return Reply(403, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes "
                                          "before you try again."}, {"Retry-After": f"{fault.seconds:g}"})
        if fault.kind == "rate-limit":
            reset = int(time.time() + fault.seconds)
            return Reply(403, {"message": "API rate limit exceeded for user ID 1."},
                         {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)})
        if fault.kind == "garbage":
            return Reply(200, None, {"Content-Type": "text/html"}, b"<html><body>502 Bad Gateway</body></html>")
        return Reply(404, {"message": "Not Found"})  # "404": gone, whatever the store holds

    def _serve(self, method: str, path: str, params: dict[str, str], auth: str | None, body: Any) -> Reply:
        if self.echo_token_in_errors:
            return Reply(422, {"message": f"Validation Failed for {auth}"})
        if auth not in (f"token {TOKEN}", f"Bearer {TOKEN}"):
            return Reply(401, {"message": "Bad credentials"})
        repo_path = f"/repos/{self.repo}"
        since = params.get("since", "")
        if method == "GET" and path == repo_path:
            owner, name = self.repo.split("/")
            return Reply(200, {"id": 1, "name": name, "full_name": self.repo, "owner": {"login": owner},
                               "url": f"{self.base}{repo_path}"})
        if method == "GET" and path == f"{repo_path}/issues":
            wanted = set(filter(None, params.get("labels", "").split(",")))
            state = params.get("state", "open")
            found = [i for i in self.issues if state in ("all", i["state"]) and wanted <= set(i["labels"])
                     and (i.get("updated_at") or "") >= since]
            return Reply(200, [self.issue_json(i) for i in found])
        issue_match = re.fullmatch(rf"{re.escape(repo_path)}/issues/(\d+)(/comments)?", path)
        issue = self._issue(issue_match.group(1)) if issue_match else None
        if issue is not None and not issue_match.group(2) and method in ("GET", "PATCH"):
            if method == "PATCH":
                issue.update({k: v for k, v in body.items() if k in ("state", "state_reason", "title", "body")})
                issue["updated_at"] = _now()
            return Reply(200, self.issue_json(issue))
        if issue is not None and issue_match.group(2) and method == "GET":
            found = [c for c in self.comments if c["issue"] == issue["number"] and c["created_at"] >= since]
            return Reply(200, [self.comment_json(c) for c in found])
        if issue is not None and issue_match.group(2) and method == "POST":
            comment = {"id": len(self.comments) + 1, "issue": issue["number"], "body": body["body"],
                       "created_at": _now()}
            self.comments.append(comment)
            issue["updated_at"] = _now()
            return Reply(201, self.comment_json(comment))
        if method == "GET" and path == "/search/issues":
            phrase = params["q"].split('"')[1]
            found = [i for i in self.issues if i["state"] == "open" and phrase in i["title"]]
            return Reply(200, {"total_count": len(found), "incomplete_results": False,
                               "items": [self.issue_json(i) for i in found]})
        if method == "POST" and path == f"{repo_path}/issues":
            issue = {"number": len(self.issues) + 1, "state": "open", "state_reason": None, **body,
                     "labels": body.get("labels", []), "updated_at": _now()}
            self.issues.append(issue)
            return Reply(201, self.issue_json(issue))
        return Reply(404, {"message": "Not Found"})


@contextmanager
def serving() -> Iterator[FakeGitHub]:
    """A FakeGitHub for ``octo/vllm`` served on 127.0.0.1 for as long as the context lasts."""
    fake = FakeGitHub("octo/vllm")

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            reply = fake.handle(self.command, self.path, self.headers.get("Authorization"), body)
            data = reply.raw if reply.raw is not None else json.dumps(reply.payload).encode()
            self.send_response(reply.status)
            headers = {"Content-Type": "application/json", **reply.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with suppress(BrokenPipeError, ConnectionResetError):  # the client gave up on a slow answer
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
