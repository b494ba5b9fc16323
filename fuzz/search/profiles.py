"""Workload profiles that generation and mutation lean toward: ``prefill`` (few requests of 1-8 output tokens) and
deep ones (long outputs, decode-time preemption, re-prefills, follow-ups, aborts); ``mixed`` draws under all.

Invariants: a profile changes which scenarios are drawn, never what is valid; a stored input's bytes decode
through ``prefill``; each profile's ``max_steps`` bounds its mutations' ``serial_steps``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from fuzz.model.draws import Choices

UNIT = NormalDist()


@dataclass(frozen=True)
class OutputLengths:
    """Output lengths as a log-normal with this ``median`` and ``sigma``, clipped to ``[1, cap]``."""

    median: float
    sigma: float
    cap: int

    def draw(self, c: Choices) -> int:
        u = min(max(c.random(), 1e-9), 1 - 1e-9)
        return max(1, min(self.cap, round(self.median * math.exp(self.sigma * UNIT.inv_cdf(u)))))

    @property
    def mean(self) -> float:
        """The mean before clipping."""
        return self.median * math.exp(self.sigma ** 2 / 2)


@dataclass(frozen=True)
class Profile:
    """How one workload shape weights generation; ``outputs`` None: the prefill profile's 1-8 tokens."""

    name: str
    doc: str
    outputs: OutputLengths | None = None
    most_requests: int = 5
    continue_rate: float = 0.15  # share of requests that continue an earlier one after its outputs
    abort_rate: float = 0.08
    pressure_rate: float = 0.0  # share of scenarios whose pool preempts decoding requests
    prompt_blocks: int = 1  # a fresh prompt tail is up to this many Mamba blocks long
    together: bool = False  # every request arrives at step 0
    max_steps: int = 256  # the bound on a mutation's serial_steps under this profile
    fresh_rate: float = 0.1  # share of mutations replaced by a fresh scenario (a generation phase, as Hypothesis has)

    @property
    def deep(self) -> bool:
        return self.outputs is not None

    def output_tokens(self, c: Choices) -> int:
        return self.outputs.draw(c) if self.outputs is not None else c.randint(1, 8)


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("prefill", "the prefill-centred mix: a few requests of 1-8 output tokens"),
    Profile("chat", "chat serving: long-tailed answers, multi-turn follow-ups, preemption after decode",
            OutputLengths(120, 1.2, 2048), most_requests=5, continue_rate=0.35, abort_rate=0.1,
            pressure_rate=0.5, max_steps=4096, fresh_rate=0.25),
    Profile("agentic", "long-context agent turns: long prompts, medium answers, chains of follow-ups",
            OutputLengths(80, 1.0, 1024), most_requests=6, continue_rate=0.6, abort_rate=0.05,
            pressure_rate=0.4, prompt_blocks=6, max_steps=4096, fresh_rate=0.25),
    Profile("batch", "offline batches: all at once, medium answers, a tight KV pool",
            OutputLengths(200, 0.8, 1536), most_requests=8, continue_rate=0.05, abort_rate=0.05,
            pressure_rate=1.0, together=True, max_steps=4096, fresh_rate=0.25),
)}
PREFILL = PROFILES["prefill"]  # the generator a stored input's bytes decode through, whatever the profile
MIXED = "mixed"  # every profile, in adaptive shares (``fuzz.search.mixture``)
DEFAULT_PROFILE = MIXED
PROFILE_NAMES = (MIXED, *PROFILES)  # what ``--profile`` takes
RENAMED = {"default": "prefill"}  # names a campaign record written before the mixture may hold


def max_steps_of_profile(name: str) -> int:
    """The bound on a mutation's serial steps under ``name``: the mixture's is the largest of its profiles'."""
    return max(p.max_steps for p in PROFILES.values()) if name == MIXED else PROFILES[name].max_steps


def home_of(index: int, workers: int) -> str | None:
    """The profile worker ``index`` of ``workers`` leans toward at start: the profiles in turn; a lone worker none."""
    return list(PROFILES)[index % len(PROFILES)] if workers > 1 else None
