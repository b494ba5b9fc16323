"""The signatures named by the open ``gdnfuzz`` issues of a GitHub repository (``gdnfuzz ci --baseline-issues``).

Reads the issues labelled ``gdnfuzz`` (state open; pull requests skipped) through the same client,
API URL and token variables as ``gdnfuzz file-issue`` (``GITHUB_API_URL``, ``GITHUB_TOKEN``; the token is
optional for a public repository). A signature is the title's ``gdnfuzz <signature>:`` head, as
``fuzz.report.issue.issue_title`` writes it. Any API failure is a ``ToolError`` (exit 5, infrastructure) whose
message never holds the token.
"""

from __future__ import annotations

import os
import re

from fuzz.errors import InputError, ToolError
from fuzz.report.github import API_URL_ENV, DEFAULT_API_URL, LABEL, REPO_RE, TOKEN_ENV

TITLE = re.compile(r"^gdnfuzz (\S+):")


def open_issue_signatures(repo: str, api_url: str | None = None) -> set[str]:
    if not REPO_RE.fullmatch(repo):
        raise InputError(f"--baseline-issues: expected owner/name, got {repo!r}")
    from github import Auth, Github

    token = os.environ.get(TOKEN_ENV)
    url = api_url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL
    client = Github(base_url=url, auth=Auth.Token(token) if token else None, timeout=30)
    try:
        issues = client.get_repo(repo).get_issues(state="open", labels=[LABEL])
        return {m.group(1) for issue in issues if "/pull/" not in issue.html_url
                and (m := TITLE.match(issue.title))}
    except Exception as exc:  # the client's and the network's errors, whatever their class
        detail = f"{type(exc).__name__}: {exc}"
        raise ToolError(f"open issues of {repo} at {url}: " + (detail.replace(token, "***") if token else detail)
                        ) from None
    finally:
        client.close()
