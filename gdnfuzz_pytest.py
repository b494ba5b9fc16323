"""gdnfuzz's pytest plugin (entry point ``pytest11: gdnfuzz``): a corpus as test items.

``pytest --gdnfuzz-corpus DIR --gdnfuzz-candidate P [--gdnfuzz-candidate Q] [--gdnfuzz-reference R]``,
or the same settings in the ini file (``gdnfuzz_corpus``, ``gdnfuzz_candidates``, ``gdnfuzz_reference``,
``gdnfuzz_fail_on``; the command line wins, ini paths are relative to the ini file's directory), collects
every scenario file under DIR (recursively, ``*.json``) as a pytest file holding one item per candidate:
``corpus/regressions/x.json::gdnfuzz[pre-51113]``, each marked ``gdnfuzz`` (select with ``-m gdnfuzz``).
An item replays its scenario on the sim tier under the candidate and the reference and fails when the
verdict diverges (correctness; ``--gdnfuzz-fail-on`` as ``gdnfuzz replay --fail-on``), with the verdict,
its summary and the ``gdnfuzz replay`` command that reproduces it in the message. A finding the reference
shares (``both-side-*``, ``reference-side-*``: e.g. a bug of the installed vLLM's own that the corpus
records) is an expected failure (xfail) naming it, as ``gdnfuzz ci`` counts it as known.

Invariants: node ids are pytest's own (the file's path relative to the rootdir, then the item's name), so
a printed id passed back on the command line runs that one item and ``--lf``/``--ff`` know the failed
ones. Run without path arguments, pytest collects the corpus beside its default paths (``testpaths`` or
the invocation directory); with path arguments, only what they name.

This module is top-level and uniquely named, and needs only the standard library and pytest: the pytest
process never imports gdnfuzz's ``fuzz`` or ``workers``, so a project with packages of its own by those
names keeps them, and gdnfuzz keeps its own. The items are replayed in one warm gdnfuzz process per
session (``fuzz.pytest_server``, whose docstring has the protocol), started at the first item with
gdnfuzz's root (the directory holding this module, and ``fuzz/`` beside it) first on its import path and
no working directory on it; without a corpus nothing is started. A process that ends without answering
fails the item in one line, and the next item starts a fresh one. The candidate's code runs in a sandbox
child of that process (``fuzz.sandbox``), never in the pytest process.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

MARKER = "gdnfuzz"
ROOT = Path(__file__).resolve().parent  # gdnfuzz's root: where ``fuzz/`` is, editable install or not
SERVER = "fuzz.pytest_server"
# ``fuzz.oracle.verdict.fail_on_choices()`` and ``default_fail_on()``, which this process cannot import
# (tests/test_pytest_plugin.py keeps them equal): the choices are checked when the session starts.
FAIL_ON_CHOICES = ("correctness", "efficiency", "any")
DEFAULT_FAIL_ON = "correctness"
# ``fuzz.model.policies.BUILTINS``' names, kept equal the same way: a policy that can only be a mistyped
# name is a usage error when the session starts, before any item (``gdnfuzz``'s own check, in words).
BUILTIN_POLICIES = ("vllm", "pre-51113", "naive")
OUTCOMES = ("pass", "xfail", "fail", "error", "usage")  # what a reply of ``fuzz.pytest_server`` says
CLOSE_S = 30.0  # how long the replay process gets to stop its sandbox children and exit once told to
SETTINGS = pytest.StashKey["Settings"]()  # the session's settings, read (and checked) when it starts
REPLAYER = pytest.StashKey["Replayer"]()  # the session's replay process, made at the first item


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gdnfuzz", "gdnfuzz corpus replay")
    group.addoption("--gdnfuzz-corpus", metavar="DIR", action="append", default=None,
                    help="collect every scenario file under DIR as a test file (repeatable; ini: gdnfuzz_corpus)")
    group.addoption("--gdnfuzz-candidate", metavar="POLICY", action="append", default=None,
                    help="candidate split policy (repeatable; default vllm; ini: gdnfuzz_candidates): a built-in, "
                         "module:attr, file.py:attr, a vLLM checkout directory, or branch:DIR")
    group.addoption("--gdnfuzz-reference", metavar="POLICY", default=None,
                    help="reference policy (default vllm; ini: gdnfuzz_reference)")
    group.addoption("--gdnfuzz-fail-on", metavar="CLASS", default=None, choices=FAIL_ON_CHOICES,
                    help=f"which findings fail an item: {', '.join(FAIL_ON_CHOICES)} "
                         f"(default {DEFAULT_FAIL_ON}; ini: gdnfuzz_fail_on)")
    parser.addini("gdnfuzz_corpus", "scenario directories collected as test files (relative to the ini file)",
                  type="paths", default=[])
    parser.addini("gdnfuzz_candidates", "candidate split policies, one item each per scenario (default vllm)",
                  type="args", default=[])
    parser.addini("gdnfuzz_reference", "reference policy (default vllm)", default="vllm")
    parser.addini("gdnfuzz_fail_on", f"which findings fail an item (default {DEFAULT_FAIL_ON})",
                  default=DEFAULT_FAIL_ON)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: a gdnfuzz corpus scenario replayed under a candidate policy")


@dataclass(frozen=True)
class Settings:
    """What the session replays: each option from the command line when given there, else from the ini."""

    corpora: tuple[Path, ...]  # absolute, existing directories
    candidates: tuple[str, ...]  # distinct, in the order given
    reference: str
    fail_on: str

    @classmethod
    def read(cls, config: pytest.Config) -> Settings:
        """The settings, or a ``pytest.UsageError`` naming the option (and the ini file) at fault."""
        where = f"{config.inipath}: " if config.inipath else ""
        given: list[str] | None = config.getoption("gdnfuzz_corpus")
        if given is not None:
            named = [(f"--gdnfuzz-corpus: {d}", Path(os.path.abspath(config.invocation_params.dir / d))) for d in given]
        else:
            named = [(f"{where}gdnfuzz_corpus: {d}", Path(os.path.abspath(d))) for d in config.getini("gdnfuzz_corpus")]
        for label, directory in named:
            if not directory.is_dir():
                raise pytest.UsageError(f"{label}: no such directory")
        fail_on = config.getoption("gdnfuzz_fail_on") or config.getini("gdnfuzz_fail_on")
        if fail_on not in FAIL_ON_CHOICES:
            raise pytest.UsageError(f"{where}gdnfuzz_fail_on: {fail_on!r} is not one of {', '.join(FAIL_ON_CHOICES)}")
        typed = config.getoption("gdnfuzz_candidate")
        candidates = typed or config.getini("gdnfuzz_candidates") or ["vllm"]
        for candidate in candidates:
            _check_policy("--gdnfuzz-candidate" if typed else f"{where}gdnfuzz_candidates", candidate,
                          config.invocation_params.dir)
        reference = config.getoption("gdnfuzz_reference")
        label = "--gdnfuzz-reference" if reference else f"{where}gdnfuzz_reference"
        reference = reference or config.getini("gdnfuzz_reference")
        _check_policy(label, reference, config.invocation_params.dir)
        return cls(tuple(directory for _, directory in named), tuple(dict.fromkeys(candidates)), reference, fail_on)

    def holds(self, path: Path) -> bool:
        """Whether ``path`` is a scenario file of the corpus."""
        return path.suffix == ".json" and any(path.is_relative_to(d) for d in self.corpora)


def _check_policy(option: str, policy: str, cwd: Path) -> None:
    """A ``pytest.UsageError`` for a policy that can only be an unknown name (not built in, no ``:``, no
    directory of that name), naming the option and the nearest built-in names; every other form is loaded
    by the replay process, which says what is wrong with it."""
    if policy in BUILTIN_POLICIES or ":" in policy or (cwd / policy).is_dir():
        return
    near = difflib.get_close_matches(policy, BUILTIN_POLICIES, n=2, cutoff=0.6)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    raise pytest.UsageError(f"{option}: unknown policy {policy!r}{hint}: use a built-in "
                            f"({', '.join(BUILTIN_POLICIES)}), module:attr, file.py:attr, a vLLM checkout "
                            "directory or branch:DIR")


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    settings = config.stash[SETTINGS] = Settings.read(config)
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return  # the paths the user named, and only those
    defaults = [Path(os.path.abspath(config.invocation_params.dir / arg)) for arg in config.args]
    config.args += [str(d) for d in settings.corpora if not any(d.is_relative_to(p) for p in defaults)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    replayer = session.config.stash.get(REPLAYER, None)
    if replayer is not None:
        replayer.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> ScenarioFile | None:
    settings = parent.config.stash.get(SETTINGS, None)
    if settings is None or not settings.holds(file_path):
        return None
    # relative to the rootdir even outside it ("../"), where pytest would make it relative to an argument
    nodeid = Path(os.path.relpath(file_path, parent.config.rootpath)).as_posix()
    return ScenarioFile.from_parent(parent, path=file_path, nodeid=nodeid)


class ReplayerGone(Exception):
    """The replay process ended, or answered something that is not a reply: ``how``, in words that follow
    "the process ..."."""

    def __init__(self, how: str):
        self.how = how
        super().__init__(how)


def describe_exit(returncode: int) -> str:
    """How a process ended, in words (``fuzz.sandbox.channel.describe_exit``'s, which this process cannot import)."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited (exit code {returncode})"


class Replayer:
    """A process answering one JSON line with one JSON line (``argv``, in ``cwd`` with ``env``): started
    at the first :meth:`ask` and after it is gone; its stderr is the pytest process's."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path):
        self.argv, self.env, self.cwd = argv, env, cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def for_session(cls, config: pytest.Config) -> Replayer:
        """``fuzz.pytest_server`` in the invocation directory: gdnfuzz's root first on its import path (and on
        ``PYTHONPATH``, for the children it starts), then this process's; no working directory on it."""
        import_path = list(dict.fromkeys([str(ROOT), *sys.path]))
        python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return cls([sys.executable, "-P", "-m", SERVER, json.dumps(import_path)],
                   {**os.environ, "PYTHONPATH": python_path, "PYTHONSAFEPATH": "1"}, config.invocation_params.dir)

    def ask(self, request: dict[str, str]) -> dict[str, str]:
        """The reply to ``request``, or :class:`ReplayerGone` (the process is then gone)."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env,
                                         cwd=self.cwd, start_new_session=True)
        stdin, stdout = self._pipes()
        try:
            stdin.write(json.dumps(request).encode() + b"\n")
            stdin.flush()
        except OSError:
            pass  # it is gone: the read below says how
        line = stdout.readline()
        if not line.endswith(b"\n"):
            raise ReplayerGone(self._reap())
        try:
            reply = json.loads(line)
            if isinstance(reply, dict) and reply.get("outcome") in OUTCOMES and isinstance(reply.get("message"), str):
                return reply
        except ValueError:
            pass
        self.close(kill=True)
        raise ReplayerGone("sent something that is not a reply and was killed")

    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin, self.proc.stdout

    def _reap(self) -> str:
        assert self.proc is not None
        try:
            how = describe_exit(self.proc.wait(timeout=CLOSE_S))
        except subprocess.TimeoutExpired:
            how = "closed its stdout and was killed"
        self.close(kill=True)
        return how

    def close(self, kill: bool = False) -> None:
        """Close its stdin (it exits at the end of its input) and reap it; its process group is killed when
        ``kill`` or once it is past :data:`CLOSE_S`."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a request it never read
                    pipe.close()
        try:
            proc.wait(timeout=0 if kill else CLOSE_S)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.wait()


class ScenarioFile(pytest.File):
    """One scenario file of the corpus: an item per candidate."""

    def collect(self) -> Iterator[pytest.Item]:
        for candidate in self.config.stash[SETTINGS].candidates:
            name = f"{MARKER}[{candidate}]"
            # the id as a string, parsed as pytest parses the ids it stores (pytest 9 reads ``[...]`` as a
            # parametrization): built from the name alone, it would never equal --lf's record of it
            yield ScenarioItem.from_parent(self, name=name, nodeid=f"{self.nodeid}::{name}", candidate=candidate)


class ScenarioFailed(Exception):
    """One corpus item's failure, in its own words: a verdict (diverged, or regressed under
    --gdnfuzz-fail-on efficiency|any), a file or policy to fix, or the replay process's end."""


class ScenarioItem(pytest.Item):
    def __init__(self, *, candidate: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.candidate = candidate
        self.add_marker(MARKER)

    def runtest(self) -> None:
        settings = self.config.stash[SETTINGS]
        shown = os.path.relpath(self.path, self.config.invocation_params.dir)  # as the user would type it
        if REPLAYER not in self.config.stash:
            self.config.stash[REPLAYER] = Replayer.for_session(self.config)
        try:
            reply = self.config.stash[REPLAYER].ask({"scenario": shown, "candidate": self.candidate,
                                                     "reference": settings.reference, "fail_on": settings.fail_on})
        except ReplayerGone as exc:
            raise ScenarioFailed(f"{shown}: the gdnfuzz process replaying it {exc.how}") from None
        if reply["outcome"] == "usage":  # a policy that cannot be loaded: the session's settings, not this item
            pytest.exit(reply["message"], returncode=pytest.ExitCode.USAGE_ERROR)
        if reply["outcome"] == "xfail":
            pytest.xfail(reply["message"])
        if reply["outcome"] in ("fail", "error"):
            raise ScenarioFailed(reply["message"])

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, self.name
