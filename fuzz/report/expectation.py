"""What an exported regression test checks (the installed vLLM's split, or the candidate's) and what it does now.

A test fails exactly where its split shows the finding's class: the candidate shows all but ``reference-side-`` ones,
the reference ``both-side-``/``reference-side-`` ones; for another split a replay says (``installed_fails``). Invariant:
every sentence saying what a test checks or expects (test docstring, ``report.md``, issue) comes from here."""

from __future__ import annotations

from dataclasses import dataclass

from fuzz.oracle.verdict import reference_is_wrong

INSTALLED = "vllm"  # the policy that is the installed vLLM's split
CHECKS = ("installed", "candidate")  # export-test --checks


def split_shows(signature: str, candidate: str, reference: str, split: str) -> bool | None:
    """Whether ``split`` shows finding ``signature`` (``candidate`` vs ``reference``); None where it is neither side."""
    if split == candidate and signature.startswith("vllm-bug-"):  # a known vLLM bug: the sides are the verdict's
        return True if candidate == reference else None
    if split == candidate:
        return not signature.startswith("reference-side-")
    if split == reference:
        return reference_is_wrong(signature)
    return None


@dataclass(frozen=True)
class Expectation:
    """What a test checks (``split``: a spec; ``vllm``: installed) and if vLLM ``release`` fails it (None: unknown)."""

    signature: str
    candidate: str
    reference: str
    split: str
    release: str
    fails: bool | None

    @property
    def checks_installed(self) -> bool:
        return self.split == INSTALLED

    @property
    def vllm_bug(self) -> bool:
        """The installed vLLM's own split shows the finding: a bug of vLLM itself."""
        return bool(self.checks_installed and self.fails)

    def what(self) -> str:
        """What the test checks, in one sentence."""
        if self.checks_installed:
            return ("It checks the installed vLLM's own split (`Scheduler._mamba_block_aligned_split`) "
                    "driven through the finding's request mix.")
        return (f"It checks the split `{self.split}` (installed on vLLM's Scheduler in place of vLLM's own) "
                "driven through the finding's request mix.")

    def result(self) -> str:
        """What the test does here and now, and on a split with the bug."""
        here = f"On vLLM {self.release}"
        if self.fails is None:
            return (f"{here} its result is not known: neither side of the finding (`{self.candidate}`, "
                    f"`{self.reference}`) is the split it checks; run it.")
        if self.vllm_bug:
            where = "vLLM's scheduling code" if "-exception-" in self.signature else "vLLM's own split"
            return f"{here} it fails: {where} has this bug; it passes once vLLM fixes it."
        if self.fails:
            return f"{here} it fails: `{self.split}` has this bug; it passes on a split without it."
        found = self.candidate if split_shows(self.signature, self.candidate, self.reference,
                                              self.candidate) else self.reference
        split = "vLLM's own split" if self.checks_installed else f"`{self.split}`"
        return f"{here} it passes: {split} does not have this bug. It fails on a split that has it, e.g. `{found}`."


def expectation(signature: str, candidate: str, reference: str, checks: str, release: str,
                installed_fails: bool | None = None) -> Expectation:
    """A test of ``signature`` that ``checks`` a split; ``installed_fails``: what a replay showed, where needed."""
    split = candidate if checks == "candidate" else INSTALLED
    fails = split_shows(signature, candidate, reference, split)
    return Expectation(signature, candidate, reference, split, release,
                       installed_fails if fails is None and split == INSTALLED else fails)
