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
records) is an expected failure (xfail) naming it, as ``gdnfuzz ci`` counts it as known. The candidate's
code runs in a sandbox child (``fuzz.sandbox``), never in the pytest process.

Invariants: node ids are pytest's own (the file's path relative to the rootdir, then the item's name), so
a printed id passed back on the command line runs that one item and ``--lf``/``--ff`` know the failed
ones. Run without path arguments, pytest collects the corpus beside its default paths (``testpaths`` or
the invocation directory); with path arguments, only what they name. Without a corpus the plugin collects
nothing and imports nothing heavy (the finding classes, for the fail-on choices, need neither vLLM nor
torch), so a project's own test run is unchanged; vLLM is imported only when the first item runs.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fuzz.errors import InputError
from fuzz.oracle.verdict import default_fail_on, fail_on_choices

MARKER = "gdnfuzz"
SETTINGS = pytest.StashKey["Settings"]()  # the session's settings, read (and checked) when it starts
SCOPE = pytest.StashKey[Any]()  # the session's DecidingScope (fuzz.sandbox.scope), made at the first item


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gdnfuzz", "gdnfuzz corpus replay")
    group.addoption("--gdnfuzz-corpus", metavar="DIR", action="append", default=None,
                    help="collect every scenario file under DIR as a test file (repeatable; ini: gdnfuzz_corpus)")
    group.addoption("--gdnfuzz-candidate", metavar="POLICY", action="append", default=None,
                    help="candidate split policy (repeatable; default vllm; ini: gdnfuzz_candidates): a built-in, "
                         "module:attr, file.py:attr, a vLLM checkout directory, or branch:DIR")
    group.addoption("--gdnfuzz-reference", metavar="POLICY", default=None,
                    help="reference policy (default vllm; ini: gdnfuzz_reference)")
    group.addoption("--gdnfuzz-fail-on", metavar="CLASS", default=None, choices=fail_on_choices(),
                    help=f"which findings fail an item: {', '.join(fail_on_choices())} "
                         f"(default {default_fail_on()}; ini: gdnfuzz_fail_on)")
    parser.addini("gdnfuzz_corpus", "scenario directories collected as test files (relative to the ini file)",
                  type="paths", default=[])
    parser.addini("gdnfuzz_candidates", "candidate split policies, one item each per scenario (default vllm)",
                  type="args", default=[])
    parser.addini("gdnfuzz_reference", "reference policy (default vllm)", default="vllm")
    parser.addini("gdnfuzz_fail_on", f"which findings fail an item (default {default_fail_on()})",
                  default=str(default_fail_on()))


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
        if fail_on not in fail_on_choices():
            raise pytest.UsageError(f"{where}gdnfuzz_fail_on: {fail_on!r} is not one of {', '.join(fail_on_choices())}")
        candidates = config.getoption("gdnfuzz_candidate") or config.getini("gdnfuzz_candidates") or ["vllm"]
        return cls(tuple(directory for _, directory in named), tuple(dict.fromkeys(candidates)),
                   config.getoption("gdnfuzz_reference") or config.getini("gdnfuzz_reference"), fail_on)

    def holds(self, path: Path) -> bool:
        """Whether ``path`` is a scenario file of the corpus."""
        return path.suffix == ".json" and any(path.is_relative_to(d) for d in self.corpora)


def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    settings = config.stash[SETTINGS] = Settings.read(config)
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return  # the paths the user named, and only those
    defaults = [Path(os.path.abspath(config.invocation_params.dir / arg)) for arg in config.args]
    config.args += [str(d) for d in settings.corpora if not any(d.is_relative_to(p) for p in defaults)]


def pytest_sessionfinish(session: pytest.Session) -> None:
    scope = session.config.stash.get(SCOPE, None)
    if scope is not None:
        scope.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> ScenarioFile | None:
    settings = parent.config.stash.get(SETTINGS, None)
    if settings is None or not settings.holds(file_path):
        return None
    # relative to the rootdir even outside it ("../"), where pytest would make it relative to an argument
    nodeid = Path(os.path.relpath(file_path, parent.config.rootpath)).as_posix()
    return ScenarioFile.from_parent(parent, path=file_path, nodeid=nodeid)


def deciding_scope(config: pytest.Config) -> Any:
    """The session's deciding scope: installed only while an item runs (the project's own tests keep
    their in-process policies), its sandbox children warm from one item to the next."""
    if SCOPE not in config.stash:
        from fuzz.sandbox.scope import DecidingScope

        config.stash[SCOPE] = DecidingScope()
    return config.stash[SCOPE]


class ScenarioFile(pytest.File):
    """One scenario file of the corpus: an item per candidate."""

    def collect(self) -> Iterator[pytest.Item]:
        for candidate in self.config.stash[SETTINGS].candidates:
            name = f"{MARKER}[{candidate}]"
            # the id as a string, parsed as pytest parses the ids it stores (pytest 9 reads ``[...]`` as a
            # parametrization): built from the name alone, it would never equal --lf's record of it
            yield ScenarioItem.from_parent(self, name=name, nodeid=f"{self.nodeid}::{name}", candidate=candidate)


class ScenarioFailed(Exception):
    """One corpus item's verdict: diverged (or regressed, under --gdnfuzz-fail-on efficiency|any)."""


class ScenarioItem(pytest.Item):
    def __init__(self, *, candidate: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.candidate = candidate
        self.add_marker(MARKER)

    def runtest(self) -> None:
        from fuzz.model.policies import resolve_policy
        from fuzz.model.scenario import load_scenario
        from fuzz.oracle.differential import replay
        from fuzz.oracle.finding import replay_argv
        from fuzz.oracle.verdict import FailOn, finding_signature, outcome

        settings = self.config.stash[SETTINGS]
        fail_on = FailOn(settings.fail_on)
        shown = os.path.relpath(self.path, self.config.invocation_params.dir)  # as the user would type it
        scenario, _ = load_scenario(shown)
        with deciding_scope(self.config).installed():  # the candidate's code runs in a sandbox child
            replayed = replay(scenario, resolve_policy(self.candidate), resolve_policy(settings.reference), "sim")
        sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
        if outcome(sig) == "known":  # not the candidate's: a bug of the reference, reported, never failing
            pytest.xfail(f"{settings.reference} is wrong there too ({sig}): {replayed.verdict.summary}")
        if outcome(sig) == "new":
            command = shlex.join(replay_argv(shown, self.candidate, settings.reference, "sim", fail_on))
            raise ScenarioFailed(f"{shown}: verdict {replayed.verdict.status} ({sig}): "
                                 f"{replayed.verdict.summary}\n  reproduce: {command}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed | InputError):  # a verdict, or a file or policy to fix
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, self.name
