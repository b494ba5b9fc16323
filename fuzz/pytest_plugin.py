"""gdnfuzz's pytest plugin (entry point ``pytest11: gdnfuzz``): a corpus as test items.

``pytest --gdnfuzz-corpus DIR --gdnfuzz-candidate P [--gdnfuzz-candidate Q] [--gdnfuzz-reference R]``
collects one item per scenario file under DIR (recursively, ``*.json``) and per candidate, with ids
``gdnfuzz[<candidate>:<file relative to DIR>]``, each marked ``gdnfuzz`` (select with ``-m gdnfuzz``).
An item replays its scenario on the sim tier under the candidate and the reference and fails when the
verdict diverges (correctness; ``--gdnfuzz-fail-on`` as ``gdnfuzz replay --fail-on``), with the verdict,
its summary and the ``gdnfuzz replay`` command that reproduces it in the message. A finding the reference
shares (``both-side-*``, ``reference-side-*``: e.g. a bug of the installed vLLM's own that the corpus
records) is an expected failure (xfail) naming it, as ``gdnfuzz ci`` counts it as known. The candidate's
code runs in a sandbox child (``fuzz.sandbox``), never in the pytest process.

Invariant: without ``--gdnfuzz-corpus`` the plugin collects nothing and imports nothing heavy (the
finding classes, for ``--gdnfuzz-fail-on``'s choices, need neither vLLM nor torch), so a project's own
test run is unchanged; vLLM is imported only when the first item runs.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fuzz.oracle.verdict import default_fail_on, fail_on_choices

MARKER = "gdnfuzz"
SCOPE = pytest.StashKey[Any]()  # the session's DecidingScope (fuzz.sandbox.scope), made at the first item


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gdnfuzz", "gdnfuzz corpus replay")
    group.addoption("--gdnfuzz-corpus", metavar="DIR", help="collect every scenario file under DIR as a test item")
    group.addoption("--gdnfuzz-candidate", metavar="POLICY", action="append", default=None,
                    help="candidate split policy (repeatable; default vllm): a built-in, module:attr, file.py:attr, "
                         "a vLLM checkout directory, or branch:DIR")
    group.addoption("--gdnfuzz-reference", metavar="POLICY", default="vllm", help="reference policy (default vllm)")
    group.addoption("--gdnfuzz-fail-on", metavar="CLASS", default=str(default_fail_on()), choices=fail_on_choices(),
                    help=f"which findings fail an item: {', '.join(fail_on_choices())} (default {default_fail_on()})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: a gdnfuzz corpus scenario replayed under a candidate policy")


def pytest_sessionstart(session: pytest.Session) -> None:
    corpus = session.config.getoption("gdnfuzz_corpus")
    if corpus is not None and not Path(corpus).is_dir():
        raise pytest.UsageError(f"--gdnfuzz-corpus: {corpus}: no such directory")


def pytest_sessionfinish(session: pytest.Session) -> None:
    scope = session.config.stash.get(SCOPE, None)
    if scope is not None:
        scope.close()


def deciding_scope(config: pytest.Config) -> Any:
    """The session's deciding scope: installed only while an item runs (the project's own tests keep
    their in-process policies), its sandbox children warm from one item to the next."""
    if SCOPE not in config.stash:
        from fuzz.sandbox.scope import DecidingScope

        config.stash[SCOPE] = DecidingScope()
    return config.stash[SCOPE]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    corpus = config.getoption("gdnfuzz_corpus")
    if corpus is None:
        return
    root = Path(corpus)
    candidates = config.getoption("gdnfuzz_candidate") or ["vllm"]
    # nodeid set here: a corpus outside the project's rootdir would otherwise get a "../.." prefix
    collector = CorpusCollector.from_parent(session, name=f"gdnfuzz:{root}", path=root.resolve(), nodeid=MARKER)
    for path in sorted(root.rglob("*.json")):
        for candidate in candidates:
            items.append(ScenarioItem.from_parent(collector, name=f"gdnfuzz[{candidate}:{path.relative_to(root)}]",
                                                  scenario=path, candidate=candidate))


class CorpusCollector(pytest.Collector):
    """The parent of the corpus items (they are added after collection, beside the project's own)."""

    def collect(self) -> Iterator[pytest.Item]:
        return iter(())


class ScenarioFailed(Exception):
    """One corpus item's verdict: diverged (or regressed, under --gdnfuzz-fail-on efficiency|any)."""


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Path, candidate: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.scenario = scenario
        self.candidate = candidate
        self.add_marker(MARKER)

    def runtest(self) -> None:
        from fuzz.model.policies import resolve_policy
        from fuzz.model.scenario import load_scenario
        from fuzz.oracle.differential import replay
        from fuzz.oracle.finding import replay_argv
        from fuzz.oracle.verdict import FailOn, finding_signature, outcome

        reference_spec = self.config.getoption("gdnfuzz_reference")
        fail_on = FailOn(self.config.getoption("gdnfuzz_fail_on"))
        scenario, _ = load_scenario(self.scenario)
        with deciding_scope(self.config).installed():  # the candidate's code runs in a sandbox child
            replayed = replay(scenario, resolve_policy(self.candidate), resolve_policy(reference_spec), "sim")
        sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
        if outcome(sig) == "known":  # not the candidate's: a bug of the reference, reported, never failing
            pytest.xfail(f"{reference_spec} is wrong there too ({sig}): {replayed.verdict.summary}")
        if outcome(sig) == "new":
            command = shlex.join(replay_argv(str(self.scenario), self.candidate, reference_spec, "sim", fail_on))
            raise ScenarioFailed(f"{self.scenario}: verdict {replayed.verdict.status} ({sig}): "
                                 f"{replayed.verdict.summary}\n  reproduce: {command}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.scenario, 0, self.name
