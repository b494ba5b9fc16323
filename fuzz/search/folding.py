"""One bug, one signature, however a run reaches it: a new name folded into a known bug where one fix removes both.

A finding of the candidate's own is named after its root cause (``fuzz.oracle.signature.root_cause_name``):
what the candidate did wrong at the decisive split decision. One bug can still reach two such names (a
missed stop seen once where the candidate ran to the budget, once where it ran to an aligned end). Before
a fuzzer stores a name that is new to it, it asks each bug it already knows whether fixing that bug fixes
this finding too: the candidate, answering as the reference on the decisions the known signature stands
for (``fuzz.oracle.signature.stands_for``), is run on the new finding's scenario
(``fuzz.oracle.differential.folds_into``); where it no longer has the finding, the finding is one more
occurrence of the known signature, and the name it would have had is a detail of the path. Where no one
known bug's fix removes it but all of theirs together do, it is still not a new bug: the oldest names it.

Invariants: a finding folds only into a signature of its own class or a more severe one (a lower rank),
so folding never hides a correctness finding under a cost's name; only candidate-side findings named
after a root cause fold, into signatures of the same kind; the known bugs are this worker's own and
those of the run's crash store (read again before each new name is stored, so a bug another worker
named is known here once its bundle is stored).
"""

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
        """Read the bundles the stores gained (another worker's minimized findings, say)."""
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
