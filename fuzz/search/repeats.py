"""Repeats recognised before the expensive work: a finding's cheap key (off the candidate's run alone), counted.

Invariants: a key stands for a signature only after a full judgement gave it, never for ``clean``; every
:data:`REJUDGE`-th repeat is judged in full, and a key given two signatures stands for none from then on; counts
reach the raw bundle at most :data:`FLUSH_SECONDS` late, at once near the deadline."""

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
    """The candidate run's key; None where it made no decision the reference would not, or shows no finding itself."""
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
