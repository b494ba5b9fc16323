"""Real findings and a real vLLM git history, for the verify-fixed and bisect tests.

``real_bundle`` stores a finding the way the reducer does (``fuzz.store.bundle.save_finding``), from a
minimized pre-#51113 regression replayed on the sim tier. ``vllm_history`` builds a git repository of
the installed vLLM's own scheduling files (``checkout_fixtures``) with the pre-#51113 split committed
in, unrelated commits, one revision whose split does not even parse, and the fix restored.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from checkout_fixtures import SCHEDULER, make_checkout, replace_split

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import FailOn, finding_signature
from fuzz.report.finding_report import store_finding

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "corpus" / "regressions" / "pr51113-fragmented-first-chunk-single.json"

# (name, subject): the commits of vllm_history, oldest first
HISTORY = (
    ("A", "[Core] v1 core as installed"),
    ("B", "[Core] Gate mamba chunk alignment on last_cache_position"),  # the pre-#51113 split: breaks it
    ("C", "[Docs] Describe align mode"),
    ("D", "[WIP] Rework the split"),  # the split does not parse: cannot be loaded
    ("E", "[Core] Fix the WIP split's syntax"),  # back to B's split
    ("F", "[Misc] Typo in a comment"),
    ("G", "[Docs] More on align mode"),
    ("H", "[Bugfix] Gate mamba alignment on the prefill end (#51113)"),  # the fix restored
    ("I", "[Docs] Changelog"),
    ("J", "[Misc] Bump version"),
)


def real_bundle(crashes: Path, candidate: str = "pre-51113", scenario_file: Path = SEED) -> Path:
    scenario, _ = load_scenario(scenario_file)
    replayed = replay(scenario, resolve_policy(candidate), resolve_policy("vllm"), "sim")
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, FailOn("correctness"))
    assert sig != "clean"
    finding = Finding(sig, scenario, scenario, replayed.verdict, candidate, "vllm", replayed.candidate)
    return store_finding(finding, crashes, None)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def vllm_history(repo: Path) -> dict[str, str]:
    """Build the repository of :data:`HISTORY` at ``repo``; returns name -> sha."""
    make_checkout(repo)
    scheduler = repo / SCHEDULER
    installed = scheduler.read_text()
    replace_split(repo)
    pre_fix = scheduler.read_text()
    scheduler.write_text(installed)
    broken = pre_fix.replace("def _mamba_block_aligned_split(", "def _mamba_block_aligned_split((", 1)
    docs = repo / "docs" / "align.md"
    docs.parent.mkdir()
    edits = {
        "A": lambda: None,
        "B": lambda: scheduler.write_text(pre_fix),
        "C": lambda: docs.write_text("Align mode caches one state per Mamba block.\n"),
        "D": lambda: scheduler.write_text(broken),
        "E": lambda: scheduler.write_text(pre_fix),
        "F": lambda: (repo / "vllm" / "v1" / "request.py").write_text(
            (repo / "vllm" / "v1" / "request.py").read_text() + "# end of request.py\n"),
        "G": lambda: docs.write_text(docs.read_text() + "Chunks must end on block boundaries.\n"),
        "H": lambda: scheduler.write_text(installed),
        "I": lambda: (repo / "CHANGELOG.md").write_text("- align mode fix\n"),
        "J": lambda: (repo / "VERSION").write_text("0.33.0.dev\n"),
    }
    _git(repo, "init", "-q", "-b", "main")
    shas = {}
    for name, subject in HISTORY:
        edits[name]()
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=dev", "-c", "user.email=dev@example.invalid", "commit", "-q", "-m", subject)
        shas[name] = _git(repo, "rev-parse", "HEAD").strip()
    return shas
