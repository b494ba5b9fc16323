"""The root cause a report gives for vLLM's own defects: the line that decides, and words that are true.

A pool that runs dry inside a KV-cache manager's allocation is decided by that manager's estimate (what
``KVCacheManager.allocate_slots`` checked the pool against), not by the ``raise`` in the block pool; a
sentence that starts with vLLM's name keeps its spelling.
"""

from __future__ import annotations

from fuzz.model.result import Fault
from fuzz.report.finding_report import sentence
from fuzz.report.root_cause import _admitting_estimate
from fuzz.report.vllm_terms import estimate_line


def _line_in(method: object) -> int:
    import inspect

    return inspect.getsourcelines(method)[1] + 1


def test_a_pool_that_runs_dry_in_mambas_allocation_is_decided_by_its_estimate():
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    line = _line_in(MambaManager.allocate_new_blocks)
    name, where, text = estimate_line(line)
    assert name == "MambaManager.get_num_blocks_to_allocate"
    assert where.startswith("vllm/v1/core/single_type_kv_cache_manager.py:")
    assert text.startswith("physical_block_cap = ")
    stack = (f"vllm/v1/core/single_type_kv_cache_manager.py:{line} in allocate_new_blocks\n"
             "    new_blocks = self.block_pool.get_new_blocks(num_new_blocks)\n"
             "vllm/v1/core/block_pool.py:679 in get_new_blocks\n"
             "    raise ValueError(...)\n"
             "ValueError: Cannot get 1 free blocks from the pool")
    fault = Fault("exception", "ValueError: Cannot get 1 free blocks from the pool", 5, None, stack)
    assert _admitting_estimate(fault) == (name, where, text)


def test_other_exceptions_and_lines_outside_a_managers_allocation_have_no_estimate():
    assert estimate_line(1) is None
    assert _admitting_estimate(Fault("exception", "AssertionError: x", 1, None, "vllm/x.py:3 in f\n    y\n")) is None


def test_a_sentence_keeps_vllms_spelling():
    assert sentence("vLLM's own split scheduled it") == "vLLM's own split scheduled it"
    assert sentence("at step 3, it ran") == "At step 3, it ran"


def test_a_finding_both_sides_have_is_reported_as_both_sides_wrong():
    from pathlib import Path

    from fuzz.model.policies import resolve_policy
    from fuzz.model.scenario import load_scenario
    from fuzz.oracle.classes.correctness import FINDING_CLASS
    from fuzz.oracle.differential import replay

    bundle = Path(__file__).resolve().parent.parent / "crashes" / \
        "both-side-poison-unaligned-end-eagle-family-internal-checkpoint"
    scenario, _ = load_scenario(bundle / "scenario.json")
    vllm = resolve_policy("vllm")
    replayed = replay(scenario, vllm, vllm)
    where, _ = FINDING_CLASS.report_section(replayed.verdict, scenario, replayed.candidate, replayed.reference,
                                            ("vllm", "vllm"))
    assert where.endswith("the wrong side: both.")
