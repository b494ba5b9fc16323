"""What a finding is checked against after it was found: the installed vLLM, a policy or checkout, or a git revision.

Invariant: a :class:`Candidate`'s ``key`` names exactly what ran (vLLM version, policy spec, or mode and full sha), so a
verification recorded under it holds for every later run with that key; ``label`` says it in words."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fuzz.model.policies import Policy, PolicyError, resolve_policy
from fuzz.model.revision import RevisionError, materialized, resolve, subject
from fuzz.oracle.finding import environment
from fuzz.store.bundle import BISECT_MODES
from fuzz.tiers import executor_for

MODES = BISECT_MODES  # split-only or whole-branch (fuzz.model.checkout)


@dataclass(frozen=True)
class Candidate:
    policy: Policy
    key: str
    label: str
    revision: str | None = None
    subject: str | None = None
    root: Path | None = None  # a revision's temporary checkout, while it exists

    def in_words(self, message: str) -> str:
        """``message`` with the temporary checkout's path replaced by the revision it holds."""
        return message if self.root is None or self.revision is None else \
            message.replace(str(self.root), self.revision[:12])


def from_spec(spec: str) -> Candidate:
    """``vllm`` (the installed vLLM, keyed by its version) or any other policy ``resolve_policy`` takes."""
    policy = resolve_policy(spec)
    if spec == "vllm":
        version = environment()["vllm"]
        return Candidate(policy, f"vllm {version}", f"the installed vLLM {version}")
    return Candidate(policy, spec, f"policy `{spec}`")


def checkout_policy(root: Path, mode: str) -> Policy:
    """A checkout directory as a policy: its split alone (``split``) or its whole scheduling code (``branch``)."""
    return resolve_policy(str(root) if mode == "split" else f"branch:{root}")


@contextmanager
def at_revision(repo: Path, rev: str, mode: str) -> Iterator[Candidate]:
    """Revision ``rev`` of ``repo`` read from git objects into a temporary directory for the context's life."""
    sha = resolve(repo, rev)
    subj = subject(repo, sha)
    with materialized(repo, sha) as root:
        try:
            policy = checkout_policy(root, mode)
        except PolicyError as exc:  # the revision cannot be loaded here: say so in its own terms
            raise RevisionError(str(exc).replace(str(root), sha[:12])) from None
        try:
            yield Candidate(policy, f"{mode}@{sha}", f"{repo} at {sha[:12]} ({subj}), {mode} mode", sha, subj, root)
        finally:
            if mode == "branch":
                executor_for("sim").close()  # the revision's candidate process goes with its files
