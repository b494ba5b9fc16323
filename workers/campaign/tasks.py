"""Ray tasks of the campaign: merge the shared corpus, verify every stored finding against the installed
vLLM (after a new one is installed on the cluster)."""

from __future__ import annotations

from fuzz.store.corpus_merge import MergeReport, merge_corpus
from fuzz.triage.candidate import from_spec
from fuzz.triage.verify import bundles_in, describe, verify_store
from workers.campaign.config import CampaignConfig


def merge_shared_corpus(config: CampaignConfig) -> MergeReport:
    """One set-cover merge of the campaign's queue (fuzz.store.corpus_merge)."""
    env = config.harness_env(config.raw / "merge")
    return merge_corpus(config.queue, config.read_only_dirs(), env, flags=(f"-rss_limit_mb={config.rss_limit_mb}",))


def verify_fixed_task(config: CampaignConfig) -> list[str]:
    """``gdnfuzz verify-fixed`` over the campaign's crash store, one line per bundle; each bundle replays once per
    vLLM version. With ``file_issues`` (not a dry run) fixed issues close and returning ones reopen."""
    repo = None if config.dry_run_issues else config.file_issues
    outcomes = verify_store(bundles_in([config.crashes]), from_spec("vllm"), config.verify_tries, "sim", repo,
                            reference=config.run.reference)  # the campaign's own, never a bundle's
    return [describe(o) for o in outcomes]
