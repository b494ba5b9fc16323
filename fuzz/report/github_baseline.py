"""The signatures named by a repository's open ``gdnfuzz`` issues (``gdnfuzz ci --baseline-issues``).

A signature is the title's ``gdnfuzz <signature>:`` head (``fuzz.report.issue.issue_title``); pull requests are
skipped. Any API failure or non-API answer is a ``FilingError`` (exit 5) whose message never holds the token."""

from __future__ import annotations

import re

from fuzz.errors import InputError
from fuzz.report.github import LABEL, REPO_RE
from fuzz.report.github_client import session

TITLE = re.compile(r"^gdnfuzz (\S+):")


def open_issue_signatures(repo: str, api_url: str | None = None) -> set[str]:
    if not REPO_RE.fullmatch(repo):
        raise InputError(f"--baseline-issues: expected owner/name, got {repo!r}")
    with session(api_url, token_required=False) as tracker:
        return tracker.read(f"list the open {LABEL} issues of {repo}", lambda: {
            m.group(1) for issue in tracker.client.get_repo(repo).get_issues(state="open", labels=[LABEL])
            if "/pull/" not in issue.html_url and (m := TITLE.match(issue.title))})
