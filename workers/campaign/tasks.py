"""Ray tasks of the campaign: minimize a raw finding, merge the shared corpus, turn a libFuzzer
artifact (an input that killed or hung the harness) into a finding."""

from __future__ import annotations

from pathlib import Path

from fuzz.model.policies import resolve_policy
from fuzz.model.result import RunResult, VerdictStatus
from fuzz.model.scenario import load_scenario
from fuzz.oracle.finding import Finding
from fuzz.oracle.judge import Divergence, Verdict
from fuzz.oracle.signature import artifact_signature
from fuzz.reduce.minimize import minimize, same_signature
from fuzz.search.mutate import decode
from fuzz.store.corpus_merge import MergeReport, merge_corpus
from fuzz.triage.replay import replay
from workers.campaign.config import CampaignConfig


def minimize_finding(raw_bundle: str, sig: str, candidate: str, reference: str, seconds: float) -> Finding | None:
    """Minimize the raw bundle's input while ``sig`` reproduces; the Finding to store, or None if it did not."""
    original, _ = load_scenario(Path(raw_bundle) / "original.json")
    cand, ref = resolve_policy(candidate), resolve_policy(reference)
    report = minimize(original, same_signature(sig, cand, ref), max_seconds=seconds)
    final = replay(report.minimized, cand, ref, "sim")
    if final.verdict.first is None:
        return None
    return Finding(sig, original, report.minimized, final.verdict, cand.spec, ref.spec, final.candidate,
                   stages=report.stage_dicts())


def merge_shared_corpus(config: CampaignConfig) -> MergeReport:
    """One set-cover merge of the campaign's queue (fuzz.store.corpus_merge)."""
    env = config.harness_env(config.raw / "merge")
    return merge_corpus(config.queue, config.read_only_dirs(), env, flags=(f"-rss_limit_mb={config.rss_limit_mb}",))


def crash_finding(kind: str, artifact: Path, log_tail: str, candidate: str, reference: str) -> Finding:
    """A Finding for an input that killed or hung the harness; its signature names the exception type."""
    scenario = decode(artifact.read_bytes())
    error = next((ln.split(":", 1)[0] for ln in reversed(log_tail.splitlines())
                  if ln[:1].isalpha() and ":" in ln and ln.split(":", 1)[0].isidentifier()), "signal")
    sig = artifact_signature(kind, error, scenario)
    summary = f"the harness {'hung on' if kind == 'hang' else 'died on'} this input ({error})"
    details = {"artifact": artifact.name, "log": log_tail[-4000:]}
    verdict = Verdict(VerdictStatus.DIVERGED, [Divergence(kind, "candidate", summary, details=details)])
    return Finding(sig, scenario, scenario, verdict, candidate, reference, RunResult("sim", candidate, sig))
