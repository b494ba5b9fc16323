"""The ``mixed`` profile: every workload profile in one input stream, in shares that follow what each finds.

Invariants: a profile changes which draw is made, never what is valid; an input's credit goes to the profile that
made it (matched by bytes); a stored input's bytes decode the same whatever the shares."""

from __future__ import annotations

import hashlib
import json
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fuzz.model.scenario import Scenario
from fuzz.search.generate import random_scenario, serial_steps
from fuzz.search.mutate import crossover, decode, mutate
from fuzz.search.profiles import MIXED, PREFILL, PROFILES, Profile

DEEP_FLOOR = 0.2  # the share of fuzzing time each deep profile keeps whatever its yield...
PREFILL_FLOOR = 0.05  # ...and the prefill profile's
DECAY = 0.9995  # per input judged: a yield half-lives in about 1,400 inputs
FINDING_WORTH = 50.0  # a new signature counts as this many new features
PRIOR_FEATURES = 1.0  # every profile's yield starts as this many features...
PRIOR_SECONDS = 0.05  # ...over this many seconds, of one input
HOME_BIAS = 4.0
REMEMBERED = 16  # mutations whose bytes are kept for credit (libFuzzer runs each right after making it)
KEPT = 64  # a deep profile's own parents: its latest inputs that reached new features
OWN_PARENT = 0.5  # share of a deep profile's mutations that start from one of its own parents

BUCKET_TOPS = (1, 2, 3, 7, 15, 31, 127, 255)  # libFuzzer's hit-count buckets: 1, 2, 3, 4-7, ..., 128+


def _bucket_bit(count: int) -> int:
    return 0 if count == 0 else 1 << next(i for i, top in enumerate(BUCKET_TOPS) if count <= top)


_BUCKET_BIT = np.array([_bucket_bit(c) for c in range(256)], dtype=np.uint8)
_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def draw_scenario(rng: random.Random, profile: str) -> Scenario:
    """A fresh scenario under ``profile``; under ``mixed``, under one of the profiles drawn evenly."""
    chosen = rng.choice(list(PROFILES.values())) if profile == MIXED else PROFILES[profile]
    return random_scenario(rng, chosen)


class Novelty:
    """The coverage features an input reached first: (block, hit-count bucket) pairs never seen before."""

    def __init__(self, size: int):
        self.seen = np.zeros(size, dtype=np.uint8)

    def new_features(self, counts: Any) -> int:
        bits = _BUCKET_BIT[counts]
        new = bits & ~self.seen
        if not new.any():
            return 0
        self.seen |= bits
        return int(_POPCOUNT[new].sum())


@dataclass
class Arm:
    """One profile's record: decayed yield, seconds and inputs (the weights), and lifetime totals (what is shown)."""

    profile: Profile
    gain: float = PRIOR_FEATURES
    seconds: float = PRIOR_SECONDS
    inputs: float = 1.0
    parents: deque[bytes] = field(default_factory=lambda: deque(maxlen=KEPT))
    execs: int = 0
    total_seconds: float = 0.0
    features: int = 0
    findings: int = 0

    @property
    def rate(self) -> float:
        return self.gain / self.seconds

    @property
    def cost(self) -> float:
        return self.seconds / self.inputs


class Mixture:
    """Chooses the profile of each mutation, and learns each profile's yield from the inputs it made."""

    def __init__(self, home: str | None = None, max_steps: int | None = None):
        self.arms = {name: Arm(p, gain=PRIOR_FEATURES * (HOME_BIAS if name == home else 1.0))
                     for name, p in PROFILES.items()}
        self.max_steps = max_steps or max(p.max_steps for p in PROFILES.values())
        self._made: OrderedDict[bytes, str] = OrderedDict()

    def shares(self) -> dict[str, float]:
        """Each profile's share of the fuzzing time now."""
        total = sum(a.rate for a in self.arms.values())
        floors = {name: floor_of(a.profile) for name, a in self.arms.items()}
        free = 1 - sum(floors.values())
        return {name: floors[name] + free * a.rate / total for name, a in self.arms.items()}

    def choose(self, rng: random.Random) -> str:
        """A profile, drawn with its share of the time over its inputs' mean run time."""
        shares = self.shares()
        return rng.choices(list(shares), weights=[share / self.arms[n].cost for n, share in shares.items()])[0]

    def mutate(self, data: bytes, max_size: int, seed: int) -> bytes:
        """atheris custom_mutator: ``mutate`` under a profile drawn by share (deep ones at times from own parents)."""
        rng = random.Random(seed ^ 0x6D6978)
        name = self.choose(rng)
        arm = self.arms[name]
        if arm.profile.deep and arm.parents and rng.random() < OWN_PARENT:
            data = rng.choice(arm.parents)
        out = mutate(data, max_size, seed, self.max_steps, arm.profile)
        self._remember(out, name)
        return out

    def crossover(self, data1: bytes, data2: bytes, max_size: int, seed: int) -> bytes:
        """atheris custom_crossover of prefill-sized parents, always the prefill profile's; a deep parent is mutated."""
        if max(_steps(data1), _steps(data2)) > PREFILL.max_steps:
            return self.mutate(data1, max_size, seed)
        out = crossover(data1, data2, max_size, seed, PREFILL.max_steps)
        self._remember(out, PREFILL.name)
        return out

    def _remember(self, out: bytes, name: str) -> None:
        self._made[_key(out)] = name
        while len(self._made) > REMEMBERED:
            self._made.popitem(last=False)

    def observe(self, data: bytes, seconds: float, features: int, findings: int) -> None:
        """Decay every record, then credit the profile that made ``data`` (none for a corpus input) with its results."""
        for arm in self.arms.values():
            arm.gain *= DECAY
            arm.seconds *= DECAY
            arm.inputs *= DECAY
        name = self._made.pop(_key(data), None)
        if name is None:
            return
        arm = self.arms[name]
        arm.gain += features + FINDING_WORTH * findings
        arm.seconds += seconds
        arm.inputs += 1
        arm.execs += 1
        arm.total_seconds += seconds
        arm.features += features
        arm.findings += findings
        if features and arm.profile.deep:
            arm.parents.append(data)

    def report(self) -> dict[str, dict[str, float]]:
        """Per profile: inputs it made and their seconds, features and signatures first found, share of time now."""
        shares = self.shares()
        return {name: {"execs": a.execs, "seconds": round(a.total_seconds, 2), "features": a.features,
                       "findings": a.findings, "share": round(shares[name], 3)} for name, a in self.arms.items()}

    def line(self) -> str:
        return json.dumps(self.report(), separators=(",", ":"))


def floor_of(profile: Profile) -> float:
    """The share of fuzzing time ``profile`` keeps whatever its yield."""
    return DEEP_FLOOR if profile.deep else PREFILL_FLOOR


def _key(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _steps(data: bytes) -> int:
    return serial_steps(decode(data))

