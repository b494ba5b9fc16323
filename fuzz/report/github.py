"""Filing a crash bundle's issue on GitHub: deduplicated per signature, the token never leaked.

Invariants kept here:
- Filing is idempotent per signature: :func:`file_issue` first looks for an
  open issue whose title names the signature (issues labelled ``gdnfuzz``,
  then the search API) and comments there; it opens an issue only when none is
  found.
- The token is read from ``GITHUB_TOKEN`` and handed to the client library
  only. It is never printed, written or put in a message: every error text
  passes through :func:`_redact` first.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.errors import ExitCode, ToolError
from fuzz.report.issue import comment_body, issue_body, issue_title, title_names
from fuzz.store.atomic import atomic_write
from fuzz.store.bundle import CrashBundle, load_bundle

REPO_RE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
LABEL = "gdnfuzz"
TOKEN_ENV = "GITHUB_TOKEN"
API_URL_ENV = "GITHUB_API_URL"
DEFAULT_API_URL = "https://api.github.com"


class FilingError(ToolError):
    """Filing failed; ``bad_input`` tells a usage error (exit 2) from an API failure (exit 1)."""

    def __init__(self, message: str, bad_input: bool = False):
        self.bad_input = bad_input
        self.exit_code = ExitCode.BAD_INPUT if bad_input else ExitCode.DIVERGED
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
    token = os.environ.get(TOKEN_ENV)
    if not token:
        raise FilingError(f"{TOKEN_ENV} is not set (the token is read from the environment only)", bad_input=True)
    api_url = api_url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL
    try:
        result = _file_with_github(bundle, repo, api_url, token, title, body)
    except FilingError as exc:
        raise FilingError(_redact(str(exc), token)) from None
    except Exception as exc:  # the client library's and the network's errors, whatever their class
        raise FilingError(_redact(f"GitHub API at {api_url}: {_describe(exc)}", token)) from None
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


def _file_with_github(
    bundle: CrashBundle, repo: str, api_url: str, token: str, title: str, body: str
) -> FileIssueResult:
    from github import Auth, Github

    client = Github(base_url=api_url, auth=Auth.Token(token), timeout=30)
    try:
        gh_repo = client.get_repo(repo)
        existing = _find_open_issue(client, gh_repo, repo, bundle.signature)
        if existing is not None:
            comment = existing.create_comment(comment_body(bundle))
            return FileIssueResult("commented", bundle.signature, title, body, existing.number, comment.html_url)
        issue = gh_repo.create_issue(title=title, body=body, labels=[LABEL])
        return FileIssueResult("opened", bundle.signature, title, body, issue.number, issue.html_url)
    finally:
        client.close()


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
