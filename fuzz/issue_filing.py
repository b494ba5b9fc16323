"""Crash bundles, and the GitHub issues filed from them.

A crash bundle is the directory ``crashes/<signature>/`` the crash store writes
for one finding:

- ``scenario.json``: the minimised scenario (the format of :mod:`fuzz.scenario`)
  with an ``expect`` annotation;
- ``original.json``: the input as the fuzzer found it;
- ``verdict.json``: ``signature``, ``kind``, ``summary`` (one line),
  ``candidate``, ``reference``, ``first_request``, ``first_step``, ``tier``,
  ``confirmed`` (``"confirmed"``, ``"not confirmed"``, ``"inconclusive"`` or
  null) and ``environment`` (``vllm``, ``torch``, ``device``; more keys allowed);
- ``report.md``: the human-readable report.

Invariants kept here:
- :func:`load_bundle` accepts a bundle only if every file is present and every
  field has its type, and the signature is the directory's name; anything else
  raises :class:`BundleError` naming the file and the field.
- Filing is idempotent per signature: :func:`file_issue` first looks for an
  open issue whose title names the signature (issues labelled ``gdnfuzz``,
  then the search API) and comments there; it opens an issue only when none is
  found.
- The token is read from ``GITHUB_TOKEN`` and handed to the client library
  only. It is never printed, written or put in a message: every error text
  passes through :func:`_redact` first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.scenario import Scenario, ScenarioError, load_scenario, pretty_json, scenario_summary

BUNDLE_FILES = ("scenario.json", "original.json", "verdict.json", "report.md")
CONFIRMED_STATES = ("confirmed", "not confirmed", "inconclusive", None)
ENVIRONMENT_KEYS = ("vllm", "torch", "device")
SIGNATURE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
REPO_RE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
LABEL = "gdnfuzz"
TOKEN_ENV = "GITHUB_TOKEN"
API_URL_ENV = "GITHUB_API_URL"
DEFAULT_API_URL = "https://api.github.com"
MAX_TITLE = 256  # GitHub's limit on an issue title
MAX_BODY = 65_000  # GitHub rejects bodies over 65,536 characters


class BundleError(ValueError):
    """A crash bundle that cannot be used, with the file and field at fault."""

    def __init__(self, file: str | Path, field_path: str, message: str):
        self.file = str(file)
        self.field_path = field_path
        super().__init__(f"{file}: {field_path}: {message}")


class FilingError(RuntimeError):
    """Filing failed; ``bad_input`` tells a usage error (exit 2) from an API failure (exit 1)."""

    def __init__(self, message: str, bad_input: bool = False):
        self.bad_input = bad_input
        super().__init__(message)


# ---------------------------------------------------------------- bundles


@dataclass(frozen=True)
class CrashBundle:
    """One validated ``crashes/<signature>/`` directory."""

    path: Path
    verdict: dict[str, Any]
    scenario: Scenario
    annotations: dict[str, Any]
    original: Scenario
    report: str

    @property
    def signature(self) -> str:
        return self.verdict["signature"]

    @property
    def environment(self) -> dict[str, str]:
        return self.verdict["environment"]


_VERDICT_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    # field: (accepted types, may be null)
    "signature": ((str,), False),
    "kind": ((str,), False),
    "summary": ((str,), False),
    "candidate": ((str,), False),
    "reference": ((str,), False),
    "first_request": ((str,), True),
    "first_step": ((int,), True),
    "tier": ((str,), False),
    "environment": ((dict,), False),
}


def load_verdict(path: str | Path) -> dict[str, Any]:
    """Read and validate one ``verdict.json``; extra fields are kept as they are."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(path, "<file>", "no such file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(path, "<json>", f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BundleError(path, "<top>", f"expected a JSON object, got {type(data).__name__}")
    for key, (types, nullable) in _VERDICT_FIELDS.items():
        if key not in data:
            raise BundleError(path, key, "missing")
        value = data[key]
        if value is None and nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            raise BundleError(path, key, f"expected {'/'.join(t.__name__ for t in types)}, got {value!r}")
    if not SIGNATURE_RE.fullmatch(data["signature"]):
        raise BundleError(path, "signature", f"{data['signature']!r} is not a file-name-safe signature")
    if "\n" in data["summary"] or not data["summary"].strip():
        raise BundleError(path, "summary", "expected one non-empty line")
    if data.get("confirmed", "missing") not in CONFIRMED_STATES:
        raise BundleError(path, "confirmed", f"expected one of {CONFIRMED_STATES}, got {data.get('confirmed')!r}")
    for key in ENVIRONMENT_KEYS:
        if not isinstance(data["environment"].get(key), str):
            raise BundleError(path, f"environment.{key}", "expected a string")
    return data


def load_bundle(path: str | Path) -> CrashBundle:
    """Load and validate the crash bundle in directory ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(path, "<dir>", "not a crash bundle directory")
    for name in BUNDLE_FILES:
        if not (path / name).is_file():
            raise BundleError(path / name, "<file>", "no such file")
    verdict = load_verdict(path / "verdict.json")
    if verdict["signature"] != path.resolve().name:
        raise BundleError(
            path / "verdict.json", "signature", f"{verdict['signature']!r} is not the directory name {path.name!r}"
        )
    try:
        scenario, annotations = load_scenario(path / "scenario.json")
        original, _ = load_scenario(path / "original.json")
    except ScenarioError as exc:
        raise BundleError(exc.file or path, exc.field_path, exc.message) from None
    if "expect" not in annotations:
        raise BundleError(path / "scenario.json", "expect", "missing (a minimised scenario records its expectation)")
    report = (path / "report.md").read_text()
    return CrashBundle(path, verdict, scenario, annotations, original, report)


# ---------------------------------------------------------------- rendering


def _replay_argv(bundle: CrashBundle, scenario_path: str) -> list[str]:
    v = bundle.verdict
    words = ["gdnfuzz", "replay", scenario_path, "--candidate", v["candidate"], "--reference", v["reference"]]
    return words + (["--tier", v["tier"]] if v["tier"] != "sim" else [])


def replay_command(bundle: CrashBundle) -> str:
    """The command that replays the minimised scenario, with the bundle's policies and tier."""
    return shlex.join(_replay_argv(bundle, f"crashes/{bundle.signature}/scenario.json"))


def regression_snippet(bundle: CrashBundle) -> str:
    """A self-contained pytest test that fails while the divergence reproduces."""
    data = {**bundle.scenario.to_dict(), **bundle.annotations}
    scenario_text = json.dumps(data, sort_keys=True, separators=(",", ":")).replace("'", "\\u0027")
    argv = repr(_replay_argv(bundle, "<scenario>")).replace("'<scenario>'", "str(path)")
    name = re.sub(r"\W", "_", bundle.signature)
    return (
        "import json\nimport subprocess\n\n"
        f"SCENARIO = json.loads(r'{scenario_text}')\n\n\n"
        f"# gdnfuzz {bundle.signature}: {bundle.verdict['summary']}\n"
        f"def test_gdnfuzz_{name}(tmp_path):\n"
        '    path = tmp_path / "scenario.json"\n'
        "    path.write_text(json.dumps(SCENARIO))\n"
        f"    run = subprocess.run({argv}, capture_output=True, text=True)\n"
        "    # gdnfuzz replay exits 1 while the candidate diverges from the reference, 0 once fixed.\n"
        "    assert run.returncode == 0, run.stdout + run.stderr\n"
    )


def issue_title(bundle: CrashBundle) -> str:
    """``gdnfuzz <signature>: <summary>``; the signature comes first so truncation keeps it."""
    title = f"gdnfuzz {bundle.signature}: {bundle.verdict['summary']}"
    return title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1] + "…"


def title_names(title: str, signature: str) -> bool:
    """Whether ``title`` names ``signature`` as a whole word (not as a prefix of a longer one)."""
    return re.search(rf"(?<![A-Za-z0-9._-]){re.escape(signature)}(?![A-Za-z0-9_-]|\.[A-Za-z0-9])", title) is not None


def _marker(signature: str) -> str:
    return f"<!-- gdnfuzz-signature: {signature} -->"


def _table(rows: list[tuple[str, str]]) -> str:
    lines = ["| | |", "|---|---|"]
    for key, value in rows:
        cell = value.replace("|", "\\|")
        lines.append(f"| {key} | {cell} |")
    return "\n".join(lines)


def _facts(bundle: CrashBundle) -> str:
    v = bundle.verdict
    first = "—" if v["first_request"] is None else f"`{v['first_request']}`"
    if v["first_step"] is not None:
        first += f" at step {v['first_step']}"
    return _table(
        [
            ("Signature", f"`{v['signature']}`"),
            ("Kind", v["kind"]),
            ("Candidate policy", f"`{v['candidate']}`"),
            ("Reference policy", f"`{v['reference']}`"),
            ("First divergent request", first),
            ("Found on tier", v["tier"]),
            ("Confirmation", _confirmation(v)),
        ]
    )


def _confirmation(v: dict[str, Any]) -> str:
    """The confirmed state and what decided it: the tier, the input and its first poisoned slot."""
    state = v.get("confirmed")
    if state is None:
        return "not yet run"
    evidence = v.get("confirmation") or {}
    decided = evidence.get("fallback") or evidence
    if "tier" not in decided:
        return state
    detail = ", ".join(filter(None, [f"{decided['tier']} tier", decided.get("input"),
                                     next(iter(decided.get("poisoned_slots") or []), None)]))
    return f"{state} ({detail})"


def _environment(bundle: CrashBundle) -> str:
    env = bundle.environment
    keys = [*ENVIRONMENT_KEYS, *sorted(k for k in env if k not in ENVIRONMENT_KEYS)]
    return _table([(k, f"`{env[k]}`") for k in keys])


def _scenario_block(bundle: CrashBundle) -> str:
    size, original = scenario_summary(bundle.scenario), scenario_summary(bundle.original)
    return (
        f"```json\n{pretty_json(bundle.scenario, bundle.annotations)}```\n"
        f"{size['requests']} requests, {size['prompt_tokens']} prompt tokens "
        f"(minimised from {original['requests']} requests, {original['prompt_tokens']} prompt tokens)."
    )


def _fit(body: str, report: str) -> str:
    """Append the full report in a collapsed block, cut to stay under GitHub's body limit."""
    room = MAX_BODY - len(body) - 200
    if room <= 0:
        return body
    if len(report) > room:
        report = report[:room] + "\n\n… (truncated; the full report is report.md in the bundle)\n"
    return f"{body}\n\n<details><summary>Full report</summary>\n\n{report}\n</details>\n"


def issue_body(bundle: CrashBundle) -> str:
    v = bundle.verdict
    body = "\n\n".join(
        [
            _marker(bundle.signature),
            f"## What diverged\n\n**{v['kind']}**: {v['summary']}\n\n{_facts(bundle)}",
            f"## Environment\n\n{_environment(bundle)}",
            f"## Minimised scenario\n\n{_scenario_block(bundle)}",
            f"## Replay\n\n```sh\n{replay_command(bundle)}\n```\n"
            "It exits 1 while the candidate diverges from the reference, 0 once fixed.",
            f"## Regression test\n\n```python\n{regression_snippet(bundle)}```",
        ]
    )
    return _fit(body, bundle.report)


def comment_body(bundle: CrashBundle) -> str:
    """A new occurrence of a signature that already has an open issue."""
    return "\n\n".join(
        [
            _marker(bundle.signature),
            f"gdnfuzz found this signature again: **{bundle.verdict['kind']}**: {bundle.verdict['summary']}",
            _facts(bundle),
            f"Environment:\n\n{_environment(bundle)}",
            f"<details><summary>Minimised scenario of this occurrence</summary>\n\n{_scenario_block(bundle)}\n"
            "</details>",
            f"```sh\n{replay_command(bundle)}\n```",
        ]
    )


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


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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
        _atomic_write(out, f"# {title}\n\n{body}")
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
    _atomic_write(out, json.dumps(record, indent=1) + "\n")
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


# ---------------------------------------------------------------- CLI


def add_file_issue_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``gdnfuzz file-issue`` on an argparse ``subparsers``; the handler is ``args.func``."""
    parser = subparsers.add_parser(
        "file-issue",
        help="render a crash bundle as a GitHub issue and file it (or comment on the open one)",
        description=f"The token is read from ${TOKEN_ENV} only. Issues are labelled {LABEL!r}.",
    )
    parser.add_argument("bundle", help="crash bundle directory, crashes/<signature>")
    parser.add_argument("--repo", required=True, help="owner/name of the GitHub repository")
    parser.add_argument(
        "--dry-run", action="store_true", help="write issue.md into the bundle and print it; no request"
    )
    parser.add_argument("--api-url", default=None, help=f"API base URL (default ${API_URL_ENV} or {DEFAULT_API_URL})")
    parser.set_defaults(func=cmd_file_issue)
    return parser


def cmd_file_issue(args: argparse.Namespace) -> int:
    """Exit 0 when filed (or rendered), 2 on a bad bundle or usage, 1 when the API call failed."""
    try:
        result = file_issue(args.bundle, args.repo, args.dry_run, args.api_url)
    except BundleError as exc:
        print(f"gdnfuzz file-issue: {exc}", file=sys.stderr)
        return 2
    except FilingError as exc:
        print(f"gdnfuzz file-issue: {exc}", file=sys.stderr)
        return 2 if exc.bad_input else 1
    if result.action == "dry-run":
        print(f"# {result.title}\n\n{result.body}")
        print(f"(dry run: written to {result.written[0]}; nothing sent)", file=sys.stderr)
    else:
        print(f"{result.action} {args.repo}#{result.number}: {result.url}")
    return 0
