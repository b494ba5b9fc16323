"""Ray tasks of the campaign: minimize a raw finding, merge the shared corpus, turn a libFuzzer
artifact (an input that killed or hung the harness) into a finding, verify every stored finding
against the installed vLLM (after a new one is installed on the cluster)."""

from __future__ import annotations

from pathlib import Path

from fuzz.model.result import RunResult
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.finding import Finding
from fuzz.oracle.signature import artifact_signature
from fuzz.oracle.verdict import Verdict, class_of_signature
from fuzz.search.mutate import decode
from fuzz.store.corpus_merge import MergeReport, merge_corpus
from fuzz.triage.candidate import from_spec
from fuzz.triage.verify import bundles_in, describe, verify_store
from workers.campaign.config import CampaignConfig


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
    cls = class_of_signature(sig)
    verdict = Verdict(cls.status, {cls.name: [Divergence(kind, "candidate", summary, details=details)]})
    return Finding(sig, scenario, scenario, verdict, candidate, reference, RunResult("sim", candidate, sig))


def verify_fixed_task(config: CampaignConfig) -> list[str]:
    """``gdnfuzz verify-fixed`` over the campaign's crash store against the installed vLLM, one line per
    bundle. Each bundle is replayed once per vLLM version (``fuzz.triage.verify``): run at every
    campaign start, it only works after a new vLLM is installed. With ``file_issues`` (and not a dry
    run) fixed issues are closed and returning ones reopened."""
    repo = None if config.dry_run_issues else config.file_issues
    outcomes = verify_store(bundles_in([config.crashes]), from_spec("vllm"), config.verify_tries, "sim", repo)
    return [describe(o) for o in outcomes]
