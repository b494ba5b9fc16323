"""Filing a crash bundle's issue on GitHub: deduplicated per signature, the token never leaked.

Invariants kept here:
- Filing is idempotent per signature: :func:`file_issue` first looks for an
  open issue whose title names the signature (issues labelled ``gdnfuzz``,
  then the search API) and comments there; it opens an issue only when none is
  found.
- The token is read from ``GITHUB_TOKEN`` and handed to the client library
  only, and only for an ``https://`` API URL or a plain ``http://`` one on
  loopback (:func:`check_api_url`). It is never printed, written or put in a
  message: every error text, and whatever the server sends back that is
  printed or saved (the issue URL), passes through :func:`_redact` first.
- Bringing an issue in line with a verification (:func:`sync_issue`) closes an open issue only for
  ``fixed`` and reopens a closed one only for ``reproduces``, each with one comment; the caller
  records the action per candidate, so each happens at most once per revision checked.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fuzz.errors import ExitCode, ToolError
from fuzz.report.issue import (
    comment_body,
    fixed_comment,
    issue_body,
    issue_title,
    reopen_comment,
    title_names,
)
from fuzz.store.atomic import atomic_write
from fuzz.store.bundle import CrashBundle, load_bundle

REPO_RE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
LABEL = "gdnfuzz"
TOKEN_ENV = "GITHUB_TOKEN"
API_URL_ENV = "GITHUB_API_URL"
DEFAULT_API_URL = "https://api.github.com"


class FilingError(ToolError):
    """Filing failed; ``bad_input`` tells a usage error (exit 2) from an API failure (exit 5, infrastructure)."""

    def __init__(self, message: str, bad_input: bool = False):
        self.bad_input = bad_input
        self.exit_code = ExitCode.BAD_INPUT if bad_input else ExitCode.INFRASTRUCTURE
        super().__init__(message)


# ---------------------------------------------------------------- filing


@dataclass
class FileIssueResult:
    """What :func:`file_issue` did: ``action`` is ``dry-run``, ``opened`` or ``commented``."""

    action: str
    signature: str
    title: str
    body: str
    number: int | None = None
    url: str | None = None
    written: list[Path] = field(default_factory=list)


def _redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def check_api_url(url: str) -> str:
    """``url`` if the token may be sent there: ``https://``, or plain ``http://`` to this machine only
    (127.0.0.0/8, ::1, localhost), where nothing crosses a network; else a FilingError (exit 2)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here, not later in the client
    except ValueError as exc:
        raise FilingError(f"--api-url: not a URL ({exc})", bad_input=True) from None
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and _is_loopback(parts.hostname):
        return url
    raise FilingError(f"--api-url: {_redact_userinfo(url)!r}: the token is only sent over https:// "
                      "(or plain http:// to a loopback address)", bad_input=True)


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _redact_userinfo(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else url


def file_issue(bundle_dir: str | Path, repo: str, dry_run: bool, api_url: str | None = None) -> FileIssueResult:
    """Render the bundle's issue and, unless ``dry_run``, open it or comment on the open one.

    A dry run writes ``issue.md`` into the bundle and sends no request. A real
    run records what it did in ``issue.json`` (repo, number, url, action).
    """
    bundle = load_bundle(bundle_dir)
    if not REPO_RE.fullmatch(repo):
        raise FilingError(f"--repo: expected owner/name, got {repo!r}", bad_input=True)
    title, body = issue_title(bundle), issue_body(bundle)
    if dry_run:
        out = bundle.path / "issue.md"
        atomic_write(out, f"# {title}\n\n{body}")
        return FileIssueResult("dry-run", bundle.signature, title, body, written=[out])
    result, token = _with_client(api_url, lambda client: _file_with_github(client, bundle, repo, title, body))
    # What the server sent back (an echo of the token in a URL, say) is printed and saved: redact it too.
    result.url = None if result.url is None else _redact(str(result.url), token)
    record = {"repo": repo, "number": result.number, "url": result.url, "action": result.action}
    out = bundle.path / "issue.json"
    atomic_write(out, json.dumps(record, indent=1) + "\n")
    result.written.append(out)
    return result


def _describe(exc: Exception) -> str:
    from github import GithubException

    if isinstance(exc, GithubException):
        message = exc.data.get("message") if isinstance(exc.data, dict) else exc.data
        return f"HTTP {exc.status}: {message}"
    return f"{type(exc).__name__}: {exc}"


def _with_client(api_url: str | None, call: Callable[[Any], Any]) -> tuple[Any, str]:
    """``call(client)`` on a client holding ``$GITHUB_TOKEN`` for a checked API URL; returns its value and
    the token (for redacting what is printed). Every error comes out as a FilingError without the token."""
    from github import Auth, Github

    token = os.environ.get(TOKEN_ENV)
    if not token:
        raise FilingError(f"{TOKEN_ENV} is not set (the token is read from the environment only)", bad_input=True)
    api_url = check_api_url(api_url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL)
    try:
        client = Github(base_url=api_url, auth=Auth.Token(token), timeout=30)
        try:
            return call(client), token
        finally:
            client.close()
    except FilingError as exc:
        raise FilingError(_redact(str(exc), token)) from None
    except Exception as exc:  # the client library's and the network's errors, whatever their class
        raise FilingError(_redact(f"GitHub API at {api_url}: {_describe(exc)}", token)) from None


def _file_with_github(client: Any, bundle: CrashBundle, repo: str, title: str, body: str) -> FileIssueResult:
    gh_repo = client.get_repo(repo)
    existing = _find_open_issue(client, gh_repo, repo, bundle.signature)
    if existing is not None:
        comment = existing.create_comment(comment_body(bundle))
        return FileIssueResult("commented", bundle.signature, title, body, existing.number, comment.html_url)
    issue = gh_repo.create_issue(title=title, body=body, labels=[LABEL])
    return FileIssueResult("opened", bundle.signature, title, body, issue.number, issue.html_url)


def _find_open_issue(client: Any, gh_repo: Any, repo: str, signature: str) -> Any:
    """The open issue whose title names ``signature``: labelled ones first, then a title search.

    The label listing is consistent at once (a second filing right after the
    first finds it); the search also finds issues whose label was dropped
    (GitHub drops labels set by users without push access).
    """
    for issue in gh_repo.get_issues(state="open", labels=[LABEL]):
        # The listing holds pull requests too; ``html_url`` tells them apart without another request.
        if "/pull/" not in issue.html_url and title_names(issue.title, signature):
            return issue
    for issue in client.search_issues(f'"{signature}" repo:{repo} is:issue is:open in:title'):
        if title_names(issue.title, signature):
            return issue
    return None


# ---------------------------------------------------------------- after a verification


def sync_issue(bundle_dir: str | Path, repo: str, record: dict[str, Any], api_url: str | None = None) -> dict[str, Any]:
    """Bring the finding's issue in line with a verification ``record`` (``fuzz.triage.verify``):
    ``fixed`` closes an open issue, ``reproduces`` reopens a closed one, each with a comment naming
    what was checked; anything else changes nothing. Returns ``{repo, number, action}`` with action
    ``closed``, ``reopened``, ``none`` or ``no issue``."""
    bundle = load_bundle(bundle_dir)
    if not REPO_RE.fullmatch(repo):
        raise FilingError(f"--repo: expected owner/name, got {repo!r}", bad_input=True)

    def call(client: Any) -> dict[str, Any]:
        gh_repo = client.get_repo(repo)
        issue = _find_issue_any_state(gh_repo, repo, bundle)
        if issue is None:
            return {"repo": repo, "number": None, "action": "no issue"}
        action = "none"
        if record["status"] == "fixed" and issue.state == "open":
            issue.create_comment(fixed_comment(bundle, record))
            issue.edit(state="closed", state_reason="completed")
            action = "closed"
        elif record["status"] == "reproduces" and issue.state == "closed":
            issue.edit(state="open")
            issue.create_comment(reopen_comment(bundle, record))
            action = "reopened"
        return {"repo": repo, "number": issue.number, "action": action}

    return _with_client(api_url, call)[0]


def _find_issue_any_state(gh_repo: Any, repo: str, bundle: CrashBundle) -> Any:
    """The finding's issue, open or closed: the one ``issue.json`` records for ``repo``, else the labelled
    issue whose title names the signature."""
    record_file = bundle.path / "issue.json"
    if record_file.is_file():
        try:
            record = json.loads(record_file.read_text())
        except ValueError:
            record = {}
        if isinstance(record, dict) and record.get("repo") == repo and isinstance(record.get("number"), int):
            return gh_repo.get_issue(record["number"])
    for issue in gh_repo.get_issues(state="all", labels=[LABEL]):
        if "/pull/" not in issue.html_url and title_names(issue.title, bundle.signature):
            return issue
    return None
