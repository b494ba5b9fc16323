# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Mamba "align" prefix caching, replayed on request mixes that gdnfuzz found by
fuzzing vLLM's scheduler.

Each case is plain data that `mamba_align_replay.replay` drives through the
installed vLLM's real Scheduler and KV-cache manager, mirroring the model runner's
Mamba state writes over exact states; the test asserts that every Mamba block the
prefix cache hashes holds the state its hash claims, that every request computes
what its prompt gives and finishes, and (for a cost case) that vLLM's split costs no
more than it did when the case was found. It checks vLLM's own split.

Each case is a bug of vLLM itself (MambaManager's align-mode estimate is one block short
when a synchronous KV-connector load is followed by a chunk that crosses into a new
block column): every case fails on vLLM 0.32.0 and 0.33.0 with the ValueError that
schedule() raises, and passes once the estimate counts that block.

Written by `gdnfuzz export-test --suite
docs/upstream/connector-pool-accounting/cases/connector-pool-accounting-valueerror-no-spec.json
docs/upstream/connector-pool-accounting/cases/connector-pool-accounting-valueerror.json`.
"""

from pathlib import Path

import pytest

from .mamba_align_replay import Case, assert_replay_holds, replay

pytestmark = pytest.mark.cpu_test

CASES = [
    # both-side-exception-valueerror-no-spec-kv-connector: exception: ValueError: Cannot
    # get 1 free blocks from the pool (found with `vllm` against `vllm`)
    pytest.param(
        {
            "engine_args": {
                "mamba_block_size": 64,
                "block_size": 64,
                "prefix_match_unit": 64,
                "speculative_config": None,
                "prefix_cache_retention_interval": 0,
                "enable_mamba_shared_prefix_checkpoint": False,
            },
            "scheduler": {
                "max_num_batched_tokens": 71,
                "long_prefill_token_threshold": 0,
                "max_num_seqs": 16,
            },
            "attention_block_size": 64,
            "prefill_checkpoint_alignment": None,
            "num_kv_blocks": 59,
            "step_budgets": [],
            "max_steps": 6870,
            "seed": 0,
            "segments": {},
            "requests": [
                {"id": "r3", "prompt": [256], "max_tokens": 2},
                {
                    "id": "xr0",
                    "prompt": [3144],
                    "max_tokens": 1,
                    "external_tokens": 3136,
                },
            ],
            "reference_costs": None,
        },
        id="connector-pool-accounting-valueerror-no-spec",
    ),
    # both-side-exception-valueerror-eagle-family-kv-connector: exception: ValueError:
    # Cannot get 2 free blocks from the pool (found with `vllm` against `vllm`)
    pytest.param(
        {
            "engine_args": {
                "mamba_block_size": 64,
                "block_size": 64,
                "prefix_match_unit": 64,
                "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
                "prefix_cache_retention_interval": 0,
                "enable_mamba_shared_prefix_checkpoint": False,
            },
            "scheduler": {
                "max_num_batched_tokens": 2048,
                "long_prefill_token_threshold": 0,
                "max_num_seqs": 16,
            },
            "attention_block_size": 64,
            "prefill_checkpoint_alignment": None,
            "num_kv_blocks": 11,
            "step_budgets": [],
            "max_steps": 204,
            "seed": 0,
            "segments": {"s1": 1},
            "requests": [
                {"id": "r4", "prompt": ["s1"], "max_tokens": 1},
                {"id": "r5", "prompt": ["s1"], "max_tokens": 1},
                {"id": "xr0", "prompt": [65], "max_tokens": 1, "external_tokens": 64},
            ],
            "reference_costs": None,
        },
        id="connector-pool-accounting-valueerror",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_mamba_align_replay(case: Case, tmp_path: Path) -> None:
    assert_replay_holds(case, replay(case, tmp_path))
