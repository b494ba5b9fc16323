"""Workload profiles: what ``gdnfuzz gen``, ``run`` and the campaign weight generation and mutation toward.

``mixed``, the default, is every profile below at once: each mutation or fresh scenario is drawn under
one of them, in shares that follow what each has recently found (``fuzz.search.mixture``). A profile
named with ``--profile`` pins it alone.

``prefill`` is the generator as it always was (named ``default`` before the mixture was): a few requests
of 1-8 output tokens, biased toward the align-mode split's prefill branches (every seed gives the
scenario it gave before profiles existed; a stored input's bytes decode through it).
The others reach the deep states of serving: long generations, decode-time KV pressure that preempts
requests after they have decoded (and again), the resumed re-prefill of prompt plus outputs, follow-ups
that continue a conversation after its outputs, and aborts in the middle of decoding. Their scenarios keep
the smaller Mamba block of two engine draws, so that their outputs cross block boundaries
(``fuzz.search.generate``).

Output lengths follow a log-normal (many short answers, a long tail), clipped to ``[1, cap]``:

- ``chat``: mean about 250 tokens (median 120, sigma 1.2), tail capped at 2048. Published figures for
  chat serving put the mean response at 215 tokens (LMSYS-Chat-1M, Zheng et al. 2023, table 1) and
  338 tokens (ShareGPT, as measured in the vLLM paper, Kwon et al. 2023, figure 11); both are
  long-tailed with answers in the thousands. Conversations continue (35% of requests are follow-ups).
- ``agentic``: long-context turns: prompts of many blocks (tool outputs appended), short to medium
  outputs (median 80, sigma 1.0, cap 1024), most requests continuing an earlier turn (60%). A shape
  stated here, not fit to a dataset.
- ``batch``: offline batches: everything arrives at once, medium outputs (median 200, sigma 0.8,
  cap 1536), a KV pool always tight. A shape stated here, not fit to a dataset.

Invariants: a profile changes which scenarios are drawn, never what is valid (every draw goes through
``Scenario`` validation, as the prefill profile's do); each deep profile's ``max_steps`` bounds its mutations'
``serial_steps`` (a decode step costs about 0.1-0.2 ms in the sim, measured by
``bench/sim_throughput.py --profile``), and the prefill profile's is ``gdnfuzz run``'s historical 256.
"""

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
    """The profile worker ``index`` of ``workers`` starts leaning toward: the profiles in turn, so that
    several workers begin spread over them; a lone worker leans toward none."""
    return list(PROFILES)[index % len(PROFILES)] if workers > 1 else None
