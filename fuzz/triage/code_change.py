"""``gdnfuzz ci``'s code-change form: the PR's code as candidate, its merge base, read from git objects, as
reference (ClusterFuzzLite's code-change mode, for a differential fuzzer).

The rule for *new*: a finding is new only if it does not reproduce on the base. Every scenario runs under
both sides in the same replay, judged by the same oracle (the exact states and outputs of
``fuzz.oracle.differential``, which need neither side to be right), so "reproduces on the base" is read
off the verdict itself: a finding the base's run shows too (``both-side-*``) is a bug of the base, one
only the base shows (``reference-side-*``) is one the PR fixes; both are known
(``fuzz.report.ci_report``). Only the candidate's own (``candidate-side``, root-cause named) is new.

Invariants:
- The base is written under the one output directory (``--out/base``, replaced on each run) from git
  objects (``fuzz.model.revision``): the user's repository is only read, and the replay commands in the
  reports stay runnable after the check.
- Both sides are loaded before anything is judged: a git failure, or a side that cannot be loaded on the
  installed vLLM, is a :class:`SideUnavailable` (exit 5, infrastructure), never a finding nor a pass.
"""

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
    """Revision ``rev`` of ``repo`` (the merge base with the default upstream branch when None), written
    under ``dest`` and loaded as a policy in ``mode`` (split-only or whole-branch)."""
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
    """Run the first scenario under ``policy`` alone, so a whole-branch side that cannot start on the
    installed vLLM says so now (as :class:`SideUnavailable`) rather than as the first replay's error."""
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
