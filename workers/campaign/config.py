"""The campaign's configuration and its on-disk layout; nothing lives only in memory, so restarted actors resume.

``corpus/queue/<actor>/``: a fuzzer's own queue (``corpus/queue/``: the merged one; ``seeds/``, ``regressions/``:
read-only). ``crashes/raw/<actor>/<sig>/``: raw bundles, one writer (that fuzzer's harness); libFuzzer artifacts
move to ``crashes/raw/reported/`` once stored. ``crashes/<sig>/``: minimized bundles, one writer at a time (the
crash store, or the verifier leasing it). ``crashes/campaign.json``: settings and runs, for ``--resume``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from fuzz.search.settings import RunSettings


@dataclass(frozen=True)
class CampaignConfig:
    """Everything an actor needs: the run's settings (``run``, as ``gdnfuzz run`` takes them) and the campaign's.
    Absolute paths (on a cluster: the same shared mount on every node)."""

    run: RunSettings = field(default_factory=RunSettings)
    fuzzers: int = 2
    verifiers: int = 1
    gpus_per_verifier: float = 1.0
    merge_every: float = 600.0
    hang_timeout: int = 60
    rss_limit_mb: int = 6144
    verify_tier: str = "engine"
    kernel_backend: str = "auto"  # verifying on the kernel tier: its backend (triton-interpret: vLLM's Triton kernels on CPU)
    file_issues: str | None = None
    dry_run_issues: bool = False
    drain_time: float = 5.0  # seconds after the deadline for minimisations in flight; then what is left is stored as found
    minimizers: int = 2  # minimisations at once (they ask Ray for no CPU: they run beside the fuzzers)
    max_restarts: int = 8  # per actor; an actor past it is dead and shown so
    cpu_share: float = 1.0  # Ray CPUs each fuzzer, verifier and task asks for (below 1 on an oversubscribed machine)
    verify_fixed: bool = False  # at the start, replay every stored finding against the installed vLLM
    verify_tries: int = 3

    @property
    def corpus(self) -> Path:
        return self.run.corpus

    @property
    def crashes(self) -> Path:
        return self.run.crashes

    @property
    def queue(self) -> Path:
        return self.run.queue

    @property
    def regressions(self) -> Path:
        return self.corpus / "regressions"

    @property
    def raw(self) -> Path:
        return self.crashes / "raw"

    def read_only_dirs(self) -> list[Path]:
        return list(self.run.committed)

    def harness_env(self, crashes: Path, home: str | None = None) -> dict[str, str]:
        """A harness's environment in campaign mode: raw bundles to ``crashes``, leaning toward ``home`` (mixture)."""
        return replace(self.run.for_worker(crashes), home=home).child_env()
