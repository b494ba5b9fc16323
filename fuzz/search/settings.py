"""A fuzzing run's settings: one frozen, typed object, and the one way it reaches a process it starts.

Invariants: it reaches a child only as :data:`ENV` (``child_env``/``from_env``; nothing else touches a run's
``GDNFUZZ_*`` setting) and ``from_env(s.child_env()) == s``; committed corpus dirs derive from ``corpus``; by
default a run writes nothing git tracks (crashes under :data:`OUTPUT_DIR`, regressions only when asked)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from fuzz.oracle.verdict import FailOn, default_fail_on
from fuzz.search.profiles import DEFAULT_PROFILE, max_steps_of_profile

ENV = "GDNFUZZ_RUN"
TARGETS = ("split", "kernels")  # the differential split target; the GDN kernels' own conformance
COMMITTED_DIRS = ("seeds", "regressions")
DEFAULT_MINIMIZE_SECONDS = 60.0
OUTPUT_DIR = Path("gdnfuzz-out")  # gdnfuzz's one output directory (git-ignored), as ``gdnfuzz ci --out``'s default
DEFAULT_CRASHES = OUTPUT_DIR / "crashes"
CRASHES_ENV = "GDNFUZZ_CRASHES"


def default_crashes() -> Path:
    """``$GDNFUZZ_CRASHES`` (a shared store), else :data:`DEFAULT_CRASHES`; never the committed ``crashes/``."""
    return Path(os.environ.get(CRASHES_ENV) or DEFAULT_CRASHES)


@dataclass(frozen=True)
class RunSettings:
    """What one fuzzing run judges, its limits and stores; ``deadline`` (epoch seconds) is set once the run starts."""

    candidate: str = "pre-51113"
    reference: str = "vllm"
    fail_on: FailOn = field(default_factory=default_fail_on)
    target: str = "split"
    # limits
    max_time: float = 300.0  # seconds; 0: no limit
    runs: int = 0  # inputs per worker; 0: no limit
    seed: int = 1  # worker i uses libFuzzer -seed=seed+i
    jobs: int = 1
    max_steps: int = max_steps_of_profile(DEFAULT_PROFILE)  # mutations whose requests take more scheduler steps are dropped
    profile: str = DEFAULT_PROFILE  # the workload shape generation and mutation lean toward
    home: str | None = None  # under the mixture: the profile this worker starts leaning toward (one of several workers)
    minimize_seconds: float = DEFAULT_MINIMIZE_SECONDS
    libfuzzer: tuple[str, ...] = ()
    deadline: float | None = None
    # stores
    corpus: Path = Path("corpus")
    crashes: Path = DEFAULT_CRASHES
    write_regressions: bool = False  # minimized findings also go to corpus/regressions (the committed corpus)
    store: Path | None = None  # a worker's: the run's crash store, whose signatures its findings may fold into

    @property
    def queue(self) -> Path:
        """Where libFuzzer adds inputs (the first corpus dir)."""
        return self.corpus / "queue"

    @property
    def committed(self) -> tuple[Path, ...]:
        """The committed corpus dirs that exist (an input from one of them is a replay, not a discovery)."""
        return tuple(d for d in (self.corpus / name for name in COMMITTED_DIRS) if d.is_dir())

    @property
    def regressions(self) -> Path | None:
        return self.corpus / "regressions" if self.write_regressions else None

    def for_worker(self, raw: Path) -> RunSettings:
        """A harness worker's settings: its raw bundles under ``raw`` (its own), the run's store as ``store``."""
        return replace(self, crashes=raw, store=self.crashes)

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a process that runs under these settings (``base``: default this process's)."""
        data = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        return {**(os.environ if base is None else base), ENV: json.dumps(data), "VLLM_LOGGING_LEVEL": "ERROR"}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RunSettings:
        """The settings a parent wrote with :meth:`child_env` (defaults when there are none)."""
        raw = (os.environ if environ is None else environ).get(ENV)
        if not raw:
            return cls()
        data: dict[str, Any] = json.loads(raw)
        data["fail_on"] = FailOn(data["fail_on"])
        data["libfuzzer"] = tuple(data["libfuzzer"])
        data["corpus"], data["crashes"] = Path(data["corpus"]), Path(data["crashes"])
        data["store"] = None if data.get("store") is None else Path(data["store"])
        return cls(**data)


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return str(value) if isinstance(value, FailOn) else value
