"""Filing a crash bundle's issue on GitHub, and bringing it in line with a verification.

Invariants: filing is idempotent per signature (an open issue naming it gets a comment, a new one opens only when none
is found); every request goes through ``fuzz.report.github_client``; the ``GITHUB_TOKEN`` is never printed, written or
put in a message; :func:`sync_issue` never reopens an issue a person closed for good (:data:`LEFT_ALONE_LABELS`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fuzz.model import json_input
from fuzz.report.github_client import FilingError, Session, redact, session, write_marker
from fuzz.report.issue import (
    comment_body,
    issue_body,
    issue_title,
    title_names,
    verify_comment,
)
from fuzz.store.atomic import atomic_write
from fuzz.store.bundle import CrashBundle, load_bundle

REPO_RE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
LABEL = "gdnfuzz"
LEFT_ALONE_LABELS = frozenset({"wontfix", "won't fix", "wont fix", "invalid", "duplicate", "not planned"})
LOOKBACK = timedelta(minutes=10)  # how far before a write its lookup reads (the server's clock may differ)


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


def _check_repo(repo: str) -> None:
    if not REPO_RE.fullmatch(repo):
        raise FilingError(f"--repo: expected owner/name, got {repo!r}", bad_input=True)


def check_tracker(repo: str, api_url: str | None = None) -> None:
    """Check ``--repo``, the token, API URL and wait limits before any request: FilingError ``bad_input`` (exit 2)."""
    _check_repo(repo)
    with session(api_url):
        pass


def file_issue(bundle_dir: str | Path, repo: str, dry_run: bool, api_url: str | None = None) -> FileIssueResult:
    """Open the bundle's issue or comment on the open one, recorded in ``issue.json``; dry run: ``issue.md`` only."""
    bundle = load_bundle(bundle_dir)
    _check_repo(repo)
    title, body = issue_title(bundle), issue_body(bundle)
    if dry_run:
        out = bundle.path / "issue.md"
        atomic_write(out, f"# {title}\n\n{body}")
        return FileIssueResult("dry-run", bundle.signature, title, body, written=[out])
    with session(api_url) as tracker:
        result = _file_with_github(tracker, bundle, repo, title, body)
    # What the server sent back (an echo of the token in a URL, say) is printed and saved: redact it too.
    result.url = None if result.url is None else redact(str(result.url), tracker.token)
    record = {"repo": repo, "number": result.number, "url": result.url, "action": result.action}
    out = bundle.path / "issue.json"
    atomic_write(out, json.dumps(record, indent=1) + "\n")
    result.written.append(out)
    return result


def _file_with_github(tracker: Session, bundle: CrashBundle, repo: str, title: str, body: str) -> FileIssueResult:
    gh_repo = tracker.read(f"read {repo}", lambda: tracker.client.get_repo(repo))
    existing = tracker.read(f"look for the open issue of {bundle.signature}",
                            lambda: _find_open_issue(tracker.client, gh_repo, repo, bundle.signature))
    if existing is not None:
        comment = _comment(tracker, existing, comment_body(bundle))
        return FileIssueResult("commented", bundle.signature, title, body, existing.number, comment.html_url)
    marker, since = write_marker(), _lookback()
    issue = tracker.write(f"open an issue for {bundle.signature}",
                          lambda: gh_repo.create_issue(title=title, body=f"{body}\n{marker}", labels=[LABEL]),
                          lambda: next((i for i in gh_repo.get_issues(state="all", since=since)
                                        if marker in (i.body or "")), None))
    return FileIssueResult("opened", bundle.signature, title, body, issue.number, issue.html_url)


def _lookback() -> datetime:
    return datetime.now(UTC) - LOOKBACK


def _comment(tracker: Session, issue: Any, body: str) -> Any:
    """One comment on ``issue``, however often its POST has to be tried."""
    marker, since = write_marker(), _lookback()
    return tracker.write(f"comment on #{issue.number}", lambda: issue.create_comment(f"{body}\n{marker}"),
                         lambda: next((c for c in issue.get_comments(since=since) if marker in (c.body or "")), None))


def _set_state(tracker: Session, gh_repo: Any, issue: Any, state: str, reason: str | None = None) -> None:
    """Close or reopen ``issue``; tried again only while the issue, read afresh, is not in that state yet."""
    change = {"state": state, **({"state_reason": reason} if reason else {})}

    def existing() -> Any:
        now = gh_repo.get_issue(issue.number)
        return now if now.state == state else None

    tracker.write(f"{'close' if state == 'closed' else 'reopen'} #{issue.number}",
                  lambda: issue.edit(**change) or issue, existing)


def _find_open_issue(client: Any, gh_repo: Any, repo: str, signature: str) -> Any:
    """The open issue whose title names ``signature``: labelled ones first (consistent at once), then a search."""
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
    """Bring the issue in line with ``record``: ``fixed`` closes it, ``reproduces`` reopens it unless closed for good.
    Returns ``{repo, number, action}``: ``closed``, ``reopened``, ``left closed`` (+ reason), ``none``, ``no issue``."""
    bundle = load_bundle(bundle_dir)
    _check_repo(repo)
    with session(api_url) as tracker:
        return _sync(tracker, bundle, repo, record)


def _sync(tracker: Session, bundle: CrashBundle, repo: str, record: dict[str, Any]) -> dict[str, Any]:
    gh_repo = tracker.read(f"read {repo}", lambda: tracker.client.get_repo(repo))
    number = _recorded_number(bundle, repo)
    if number is not None:
        issue = tracker.read(f"read issue #{number} (recorded in {bundle.path / 'issue.json'})",
                             lambda: gh_repo.get_issue(number))
    else:
        issue = tracker.read(f"look for the issue of {bundle.signature}", lambda: _labelled_issue(gh_repo, bundle))
    if issue is None:
        return {"repo": repo, "number": None, "action": "no issue"}
    done = {"repo": repo, "number": issue.number}
    if record["status"] == "fixed" and issue.state == "open":
        _comment(tracker, issue, verify_comment(bundle, record, reproduces=False))
        _set_state(tracker, gh_repo, issue, "closed", "completed")
        return {**done, "action": "closed"}
    if record["status"] == "reproduces" and issue.state == "closed":
        reason = closed_for_good(issue)
        if reason is not None:
            return {**done, "action": "left closed", "reason": reason}
        _set_state(tracker, gh_repo, issue, "open")
        _comment(tracker, issue, verify_comment(bundle, record, reproduces=True))
        return {**done, "action": "reopened"}
    return {**done, "action": "none"}


def closed_for_good(issue: Any) -> str | None:
    """Why a person's close stands (not planned, or a :data:`LEFT_ALONE_LABELS` label), or None."""
    if getattr(issue, "state_reason", None) == "not_planned":
        return "closed as not planned"
    for label in issue.labels:
        if re.sub(r"[\s_-]+", " ", label.name.strip().lower()).replace("\u2019", "'") in LEFT_ALONE_LABELS:
            return f"labelled {label.name!r}"
    return None


def _recorded_number(bundle: CrashBundle, repo: str) -> int | None:
    """The issue number ``issue.json`` records for ``repo`` (None when there is no usable record)."""
    record_file = bundle.path / "issue.json"
    if not record_file.exists():
        return None
    try:
        record = json_input.read_json(record_file, lambda f, m: FilingError(f"{record_file}: {f}: {m}"))
    except FilingError:
        return None
    number = record.get("number") if isinstance(record, dict) and record.get("repo") == repo else None
    return number if isinstance(number, int) and not isinstance(number, bool) else None


def _labelled_issue(gh_repo: Any, bundle: CrashBundle) -> Any:
    """The labelled issue, open or closed, whose title names the bundle's signature."""
    for issue in gh_repo.get_issues(state="all", labels=[LABEL]):
        if "/pull/" not in issue.html_url and title_names(issue.title, bundle.signature):
            return issue
    return None
