"""Repeats recognised before the expensive work: a finding's cheap key, and its occurrences counted in batches.

A fuzzer of a buggy candidate meets its bug again and again. Judging every occurrence in full (the
reference and truth runs, the root-cause search, the raw bundle's ``verdict.json`` rewritten and
fsynced) made such a candidate fuzz at half the speed of a clean one. Here an input's *cheap key* is
read off the candidate's run alone: its first split decision that differs from the reference's, named
the way a root cause is named (``fuzz.oracle.signature.root_cause_name``), and what the run shows by
itself (its own first finding, a poisoned slot, a fault or a bad resume, named as the correctness class
names a symptom). Only a run that shows a finding by itself has a key: whether a run that shows none is
a finding (a cost, a bug of the reference's own) only the reference's run can tell. An input whose key a
full judgement has already named counts as one more occurrence of that signature.

Invariants:
- a key stands for a signature only after a full judgement of an input with that key gave it, and
  never for ``clean`` (a disagreement that was harmless once may cost something another time);
- every ``REJUDGE``-th repeat of a key is judged in full again; a key whose full judgements gave two
  signatures stands for none from then on (its inputs are judged in full), so a second bug behind a
  known key is still found;
- counted occurrences reach the raw bundle at most ``FLUSH_SECONDS`` late, and at once within
  ``FLUSH_SECONDS`` of the run's deadline (libFuzzer ends the process without Python's exit handlers).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario
from fuzz.oracle.judge import own_findings
from fuzz.oracle.signature import correctness_signature, root_cause_name
from fuzz.store.bundle import add_occurrences

REJUDGE = 16  # one repeat in this many is judged in full
FLUSH_SECONDS = 0.5
AMBIGUOUS = ""  # what a key stands for once two full judgements of it disagreed

Key = tuple[str, str]


def cheap_key(run: RunResult, scenario: Scenario) -> Key | None:
    """The candidate run's key (module docstring). None where the run made no decision the reference would
    not, or shows nothing by itself: then only the reference's run can tell a finding (a cost, a bug of the
    reference's own) from a clean input."""
    own = own_findings(run)
    if run.disagreement is None or not own:
        return None
    return root_cause_name(run.disagreement), correctness_signature(own, scenario, run)


class Repeats:
    """Which keys full judgements have named, and the occurrences counted since the last flush."""

    def __init__(self, deadline: float | None = None):
        self.named: dict[Key, str] = {}
        self.seen: Counter[Key] = Counter()
        self.pending: Counter[tuple[Path, bool]] = Counter()  # (raw bundle, replay) -> occurrences not yet written
        self.deadline = deadline
        self.flushed = time.monotonic()

    def known(self, key: Key | None) -> str | None:
        """The signature ``key`` stands for, unless it stands for none or this repeat is to be judged in full."""
        if key is None or not self.named.get(key):
            return None
        self.seen[key] += 1
        return None if self.seen[key] % REJUDGE == 0 else self.named[key]

    def learn(self, key: Key | None, signature: str) -> None:
        """What a full judgement of an input with ``key`` gave."""
        if key is None or signature == "clean":
            return
        before = self.named.setdefault(key, signature)
        if before != signature:
            self.named[key] = AMBIGUOUS

    def count(self, bundle: Path, replay: bool) -> None:
        """One more occurrence of the signature stored raw in ``bundle``."""
        self.pending[(bundle, replay)] += 1
        now = time.monotonic()
        near_end = self.deadline is not None and time.time() > self.deadline - FLUSH_SECONDS
        if near_end or now - self.flushed >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        for (bundle, replay), n in self.pending.items():
            add_occurrences(bundle, n, replay)
        self.pending.clear()
        self.flushed = time.monotonic()
