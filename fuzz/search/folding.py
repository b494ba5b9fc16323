"""One bug, one signature: a new root-cause name folds into a known bug whose fix also removes the finding.

Invariants: a finding folds only into its own class or a more severe one; only candidate-side root-cause findings
fold; known bugs are this worker's and the crash store's, re-read before a new name is stored."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fuzz.model.policies import Policy
from fuzz.model.result import SplitDisagreement
from fuzz.model.scenario import Scenario
from fuzz.oracle.differential import Replayed, folds_into
from fuzz.oracle.verdict import FindingClass, class_of_signature, finding_class, outcome
from fuzz.store.bundle import BundleError, load_verdict


@dataclass(frozen=True)
class KnownBug:
    signature: str
    cls: FindingClass
    cause: SplitDisagreement


class KnownBugs:
    """The candidate-side signatures with a root cause that a new finding may fold into."""

    def __init__(self, *stores: Path | None):
        self.stores = [store for store in stores if store is not None]
        self.bugs: dict[str, KnownBug] = {}
        self.refresh()

    def refresh(self) -> None:
        for store in self.stores:
            for verdict in sorted(store.glob("*/verdict.json")):
                if verdict.parent.name not in self.bugs:
                    self._read(verdict)

    def _read(self, path: Path) -> None:
        try:
            data = load_verdict(path)
        except BundleError:
            return  # a bundle being written or broken names no bug to fold into
        cause = (data.get("verdict") or {}).get("root_cause")
        if cause is None or outcome(data["signature"]) != "new":
            return
        try:
            known = SplitDisagreement(**{**cause, "conditions": tuple(cause["conditions"])})
        except (TypeError, KeyError):
            return  # a root cause recorded by another gdnfuzz version
        self.add(data["signature"], known, finding_class(data["class"]))

    def add(self, signature: str, cause: SplitDisagreement, cls: FindingClass) -> None:
        self.bugs.setdefault(signature, KnownBug(signature, cls, cause))

    def fold(self, signature: str, scenario: Scenario, replayed: Replayed, candidate: Policy,
             reference: Policy) -> str | None:
        """The known signature the finding ``signature`` (of ``replayed``) folds into, or None: it is new."""
        cause = replayed.verdict.root_cause
        if signature in self.bugs or outcome(signature) != "new" or cause is None:
            return None
        self.refresh()
        if signature in self.bugs:
            return None
        cls = class_of_signature(signature)
        compatible = [bug for bug in self.bugs.values() if bug.cls.rank <= cls.rank]

        def fixed_by(bugs: list[KnownBug]) -> bool:
            return folds_into(scenario, candidate, reference, cls, [b.cause for b in bugs], replayed.reference,
                              replayed.truth)

        found = next((bug for bug in compatible if fixed_by([bug])), None)
        if found is None and len(compatible) > 1 and fixed_by(compatible):
            found = compatible[0]  # only the known bugs together explain it: the oldest names it
        if found is not None:
            return found.signature
        self.add(signature, cause, cls)
        return None
