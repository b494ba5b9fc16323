"""``gdnfuzz ci``'s code-change form: the PR's code as candidate against its merge base, read from git objects.

A finding is new only if it does not reproduce on the base, read off the same verdict (``both-side-*``,
``reference-side-*`` are known). Invariants: the base goes under ``--out/base`` (the repository is only read); both
sides load before anything is judged, a failure being :class:`SideUnavailable` (exit 5), never a finding nor a pass."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import ConfigRejected, InputError, ToolError
from fuzz.model.policies import Policy, resolve_policy
from fuzz.model.revision import default_base, extract, resolve, subject
from fuzz.model.scenario import load_scenario
from fuzz.tiers import executor_for
from fuzz.triage.candidate import checkout_policy


class SideUnavailable(ToolError):
    """The base cannot be read from git, or a side cannot be loaded on the installed vLLM (exit 5)."""


@dataclass(frozen=True)
class Base:
    sha: str
    subject: str
    policy: Policy

    @property
    def label(self) -> str:
        return f"{self.sha[:12]} ({self.subject})"


def checkout_base(repo: Path, rev: str | None, dest: Path, mode: str) -> Base:
    """Revision ``rev`` of ``repo`` (None: the upstream merge base) under ``dest``, loaded as a policy in ``mode``."""
    try:
        sha = resolve(repo, rev) if rev is not None else default_base(repo)
        subj = subject(repo, sha)
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        extract(repo, sha, dest)
        return Base(sha, subj, checkout_policy(dest, mode))
    except InputError as exc:  # git, or a base whose code the installed vLLM cannot load
        raise SideUnavailable(f"the base {rev or 'merge base'}: {exc}") from None


def ensure_loads(policy: Policy, side: str, files: list[Path]) -> None:
    """Run the first scenario under ``policy`` alone, so a side that cannot start says so now (SideUnavailable)."""
    if policy.checkout is None or not files:
        return  # built in, or compiled when resolved: already loaded
    scenario, _ = load_scenario(files[0])
    try:
        executor_for("sim").run(scenario, policy)
    except ConfigRejected:
        raise
    except InputError as exc:
        raise SideUnavailable(f"the {side} cannot be loaded on the installed vLLM: {exc}") from None


def candidate_policy(spec: str) -> Policy:
    """The PR's side as a policy; one that cannot be loaded is infrastructure here, not bad input."""
    try:
        return resolve_policy(spec)
    except InputError as exc:
        raise SideUnavailable(f"the candidate cannot be loaded on the installed vLLM: {exc}") from None
