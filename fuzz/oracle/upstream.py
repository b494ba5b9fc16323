"""vLLM's own bugs, known by their fixes: a finding the reference shares is such a bug where the reference's run of
the scenario, with that bug's fix applied, has no correctness finding left. One name per bug, ``vllm-bug-<folder>``,
whatever symptom and side it showed.

A bug is a folder of ``docs/upstream/`` (its report, ``fix.py``, a suite) with ``bug.json``: ``summary`` (for people);
``replaces``, either ``"split"`` (vLLM's split: the fix stands for the reference only where the reference is the
installed split) or ``"module:Class.attribute"`` (set for the one run, then put back); ``with``, the attribute of
``fix.py`` that replaces it. Invariant: matching only runs the reference side again; it never changes a verdict's
findings, only the name a shared one goes by (``Verdict.upstream``)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.model.policies import Policy
from fuzz.model.result import RunResult

UPSTREAM = Path(__file__).resolve().parents[2] / "docs" / "upstream"
PREFIX = "vllm-bug-"
INSTALLED_SPLIT = "vllm"


@dataclass(frozen=True)
class UpstreamBug:
    """One known vLLM bug (module docstring): its folder's name, what its fix replaces, and with what."""

    name: str
    replaces: str
    fix: str

    @property
    def folder(self) -> Path:
        return UPSTREAM / self.name

    def stands_for(self, reference: Policy) -> bool:
        """Whether the fix can be put on ``reference``'s run: a split fix only on the installed split's."""
        return self.replaces != "split" or (reference.spec == INSTALLED_SPLIT and reference.checkout is None)

    @contextmanager
    def applied(self, reference: Policy) -> Iterator[Policy]:
        """``reference`` with this fix, for the runs made inside the block (a patched attribute put back after)."""
        fixed = _fix_module(self.folder)[self.fix]
        if self.replaces == "split":
            yield Policy(f"{reference.name}+{self.name}", f"{self.folder / 'fix.py'}:{self.fix}", fixed)
            return
        module, _, attribute = self.replaces.partition(":")
        owner_name, _, name = attribute.rpartition(".")
        owner = getattr(importlib.import_module(module), owner_name)
        before = owner.__dict__[name]
        setattr(owner, name, fixed)
        try:
            yield reference
        finally:
            setattr(owner, name, before)


@functools.cache
def _fix_module(folder: Path) -> dict[str, Any]:
    """The names ``folder/fix.py`` defines (loaded once, in this process: gdnfuzz's own files)."""
    spec = importlib.util.spec_from_file_location(f"gdnfuzz_upstream_{folder.name.replace('-', '_')}",
                                                  folder / "fix.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)


@functools.cache
def known_bugs() -> tuple[UpstreamBug, ...]:
    """Every folder of ``docs/upstream/`` with a ``bug.json``, in name order."""
    bugs = []
    for path in sorted(UPSTREAM.glob("*/bug.json")):
        data = json.loads(path.read_text())
        bugs.append(UpstreamBug(path.parent.name, data["replaces"], data["with"]))
    return tuple(bugs)


def matching_bug(reference: Policy, run_fixed: Callable[[Policy], RunResult],
                 sound: Callable[[RunResult], bool]) -> UpstreamBug | None:
    """The first known bug whose fix leaves ``reference``'s run sound: ``run_fixed`` runs the scenario under a policy
    (inside the fix), ``sound`` says whether a run has no correctness finding of its own."""
    for bug in known_bugs():
        if not bug.stands_for(reference):
            continue
        with bug.applied(reference) as fixed:
            run = run_fixed(fixed)
        if sound(run):
            return bug
    return None

