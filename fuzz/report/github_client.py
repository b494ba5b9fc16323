"""One session on the GitHub API that is safe to retry and never waits without bound (PyGithub's retries off).

Invariants: every request has a timeout; a read is retried after a transient failure only while the call's waits stay
within :attr:`Patience.max_wait`, else a :class:`FilingError`; a write is never re-sent blind (what it made is looked up
by its :func:`write_marker` first); the token goes only where :func:`check_api_url` allows; messages are redacted."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from fuzz.errors import ExitCode, ToolError
from fuzz.loopback import is_loopback_host
from fuzz.model.deadline import seconds_from_env

T = TypeVar("T")
TOKEN_ENV = "GITHUB_TOKEN"
API_URL_ENV = "GITHUB_API_URL"
DEFAULT_API_URL = "https://api.github.com"
MAX_WAIT_ENV = "GDNFUZZ_GITHUB_MAX_WAIT"
TIMEOUT_ENV = "GDNFUZZ_GITHUB_TIMEOUT"
SECONDARY_RATE_WAIT = 60.0  # GitHub's advice for a secondary rate limit that names no wait
FIRST_BACKOFF = 0.5
MAX_SECONDS = 86_399.0  # a wait limit or request timeout beyond a day is a typo


class FilingError(ToolError):
    """A tracker call failed; ``bad_input`` tells a usage error (exit 2) from an API failure (exit 5)."""

    def __init__(self, message: str, bad_input: bool = False):
        self.bad_input = bad_input
        self.exit_code = ExitCode.BAD_INPUT if bad_input else ExitCode.INFRASTRUCTURE
        super().__init__(message)


@dataclass(frozen=True)
class Patience:
    """How long a call may take: waits end within ``max_wait`` of its start, each request within ``request_timeout``."""

    max_wait: float = 60.0
    request_timeout: int = 20

    @classmethod
    def from_env(cls) -> Patience:
        """``$GDNFUZZ_GITHUB_MAX_WAIT`` and ``$GDNFUZZ_GITHUB_TIMEOUT`` (seconds), else the defaults."""
        return cls(seconds_from_env(MAX_WAIT_ENV, cls.max_wait, MAX_SECONDS),
                   max(1, round(seconds_from_env(TIMEOUT_ENV, cls.request_timeout, MAX_SECONDS))))


def redact(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def check_api_url(url: str) -> str:
    """``url`` if the token may go there (``https://``, or ``http://`` to loopback only), else FilingError (exit 2)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here, not later in the client
    except ValueError as exc:
        raise FilingError(f"--api-url: not a URL ({exc})", bad_input=True) from None
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and is_loopback_host(parts.hostname):
        return url
    raise FilingError(f"--api-url: {_redact_userinfo(url)!r}: the token is only sent over https:// "
                      "(or plain http:// to a loopback address)", bad_input=True)


def _redact_userinfo(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl() if "@" in parts.netloc else url


def write_marker() -> str:
    """A marker unique to one write, put in the body it sends so that the write can be found afterwards."""
    return f"<!-- gdnfuzz-write: {uuid.uuid4().hex} -->"


def describe(exc: BaseException) -> str:
    """An API failure in words: ``HTTP <status>: <message>``, else the exception's class and text."""
    import requests
    from github import GithubException

    if isinstance(exc, GithubException):
        message = exc.data.get("message") if isinstance(exc.data, dict) else exc.data
        return f"HTTP {exc.status}: {message}"
    if isinstance(exc, requests.exceptions.RequestException):
        return f"{type(exc).__name__}: {exc}"
    return f"an answer that is not the GitHub API's ({type(exc).__name__}: {exc})"


def server_wait(exc: BaseException, attempt: int) -> tuple[float, str] | None:
    """``(seconds, why)`` to wait after ``exc``, the ``attempt``-th failure; None when trying again cannot help."""
    import requests
    from github import GithubException, RateLimitExceededException

    backoff = FIRST_BACKOFF * 2 ** attempt
    if isinstance(exc, requests.exceptions.Timeout | requests.exceptions.ConnectionError):
        return backoff, "no answer"
    if not isinstance(exc, GithubException):
        return None
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    if "retry-after" in headers:
        try:
            return max(float(headers["retry-after"]), 0.0), f"Retry-After: {headers['retry-after']}"
        except ValueError:
            return SECONDARY_RATE_WAIT, f"Retry-After: {headers['retry-after']!r}"
    if headers.get("x-ratelimit-remaining") == "0" and str(headers.get("x-ratelimit-reset", "")).isdigit():
        reset = int(headers["x-ratelimit-reset"]) - time.time() + 1
        return max(reset, 0.0), f"rate limit resets in {reset:.0f}s"
    if isinstance(exc, RateLimitExceededException) or exc.status == 429:
        return SECONDARY_RATE_WAIT, "rate limited"
    if exc.status >= 500:
        return backoff, "server error"
    return None


class Session:
    """Reads and writes on one client (see the module invariants); every error is a FilingError."""

    def __init__(self, client: Any, api_url: str, token: str | None, patience: Patience,
                 sleep: Callable[[float], None] = time.sleep):
        self.client, self.api_url, self.token, self.patience, self._sleep = client, api_url, token, patience, sleep

    def read(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` (requests that change nothing), tried again after transient failures within the limit."""
        return self._retrying(what, call, time.monotonic() + self.patience.max_wait)

    def write(self, what: str, send: Callable[[], T], existing: Callable[[], T | None]) -> T:
        """``send()`` once; after a failure, again only when ``existing()`` finds nothing, all within the limit."""
        deadline = time.monotonic() + self.patience.max_wait
        attempt = 0
        while True:
            try:
                return send()
            except Exception as exc:  # the client library's and the network's errors, whatever their class
                self._wait(what, exc, attempt, deadline)
            found = self._retrying(f"{what} (looking for what the failed attempt left)", existing, deadline)
            if found is not None:
                return found
            attempt += 1

    def _retrying(self, what: str, call: Callable[[], T], deadline: float) -> T:
        attempt = 0
        while True:
            try:
                return call()
            except FilingError:
                raise
            except Exception as exc:  # as in write
                self._wait(what, exc, attempt, deadline)
            attempt += 1

    def _wait(self, what: str, exc: Exception, attempt: int, deadline: float) -> None:
        """Sleep as long as the server asks after ``exc``, or raise the FilingError that ends the call."""
        wait = server_wait(exc, attempt)
        failure = f"GitHub API at {self.api_url}: {what}: {describe(exc)}"
        if wait is None:
            raise FilingError(redact(failure, self.token)) from None
        seconds, why = wait
        if time.monotonic() + seconds > deadline:
            raise FilingError(redact(f"{failure}; gave up after {attempt + 1} attempt(s): {why} is beyond the "
                                     f"{self.patience.max_wait:g}s a call may wait (${MAX_WAIT_ENV})",
                                     self.token)) from None
        self._sleep(seconds)


@contextmanager
def session(api_url: str | None, token_required: bool = True) -> Iterator[Session]:
    """A :class:`Session` on ``api_url`` (default ``$GITHUB_API_URL``) with ``$GITHUB_TOKEN``; failures: FilingError."""
    from github import Auth, Github

    token = os.environ.get(TOKEN_ENV) or None
    if token is None and token_required:
        raise FilingError(f"{TOKEN_ENV} is not set (the token is read from the environment only)", bad_input=True)
    url = api_url or os.environ.get(API_URL_ENV) or DEFAULT_API_URL
    url = check_api_url(url) if token else url
    patience = Patience.from_env()
    try:
        client = Github(base_url=url, auth=Auth.Token(token) if token else None, timeout=patience.request_timeout,
                        retry=None)
        try:
            yield Session(client, url, token, patience)
        finally:
            client.close()
    except FilingError as exc:
        raise FilingError(redact(str(exc), token), exc.bad_input) from None
    except Exception as exc:  # the client library's and the network's errors, whatever their class
        raise FilingError(redact(f"GitHub API at {url}: {describe(exc)}", token)) from None
