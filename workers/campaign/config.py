"""The campaign's configuration, and its on-disk layout.

On-disk layout (everything the campaign knows lives here, so a restarted actor
or a restarted campaign resumes from it; nothing is kept only in memory):

- ``corpus/queue/<actor>/``: the fuzzer's libFuzzer output corpus (its first
  corpus directory); ``corpus/queue/`` top level: the shared, merged corpus;
  ``corpus/seeds/`` and ``corpus/regressions/``: read-only inputs.
- ``crashes/raw/<actor>/<signature>/``: the bundle the fuzzer's harness saves
  for each divergence it meets (unminimized; its ``hits`` count that fuzzer's
  hits). One writer: that fuzzer's harness.
- ``crashes/raw/<actor>-crash-*`` / ``-timeout-*`` / ``-oom-*``: libFuzzer's
  artifact for an input that killed or hung the harness; moved to
  ``crashes/raw/reported/`` once the crash store has saved its finding.
- ``crashes/<signature>/``: the deduplicated, minimized bundle
  (:mod:`fuzz.store.bundle`). One writer at a time: the crash store actor, or the
  verifier holding the signature's lease (``confirm_bundle`` writes
  ``confirmed`` into its verdict.json); the crash store never writes a leased
  bundle. Before any of them starts, the verify-fixed task (``verify_fixed``)
  records each bundle's verification against the installed vLLM.

Actors are restarted by Ray, on any node with room, at most ``max_restarts`` times
each: each starts its work thread in ``__init__``, so a restarted actor resumes by
itself from the disk state. ``crashes/campaign.json`` holds the campaign's own
settings and the start of each of its runs, for ``gdnfuzz campaign --resume``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from fuzz.search.settings import RunSettings


@dataclass(frozen=True)
class CampaignConfig:
    """Everything an actor needs: the fuzzing run's own settings (``run``: the policies, what is counted,
    the limits, the stores, as ``gdnfuzz run`` takes them) and the campaign's. Absolute paths (on a
    cluster: the same shared mount on every node)."""

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
        """A harness's environment in campaign mode: the run's settings with raw bundles going to ``crashes``
        (the crash store minimizes them and writes the regressions), leaning first toward ``home`` under the
        mixture (``fuzz.search.profiles.home_of``)."""
        return replace(self.run.for_worker(crashes), home=home).child_env()
