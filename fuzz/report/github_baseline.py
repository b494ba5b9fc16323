"""The signatures named by the open ``gdnfuzz`` issues of a GitHub repository (``gdnfuzz ci --baseline-issues``).

Reads the issues labelled ``gdnfuzz`` (state open; pull requests skipped) through the same session as
``gdnfuzz file-issue`` (``fuzz.report.github_client``: ``GITHUB_API_URL``, ``GITHUB_TOKEN``, optional for
a public repository; bounded waits). A signature is the title's ``gdnfuzz <signature>:`` head, as
``fuzz.report.issue.issue_title`` writes it. Any API failure, or an answer that is not the API's, is a
``FilingError`` (exit 5, infrastructure) whose message never holds the token.
"""

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
