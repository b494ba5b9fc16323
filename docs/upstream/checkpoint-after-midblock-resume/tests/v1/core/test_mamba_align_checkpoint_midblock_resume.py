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

Each case is a bug of vLLM itself (a resume mid-block whose final chunk exports an
internal prefill checkpoint): every case fails on vLLM 0.32.0 and 0.33.0 and passes
once the split keeps the next-boundary stop for a mid-block start.

Written by `gdnfuzz export-test --suite
docs/upstream/checkpoint-after-midblock-resume/cases/b32.json
docs/upstream/checkpoint-after-midblock-resume/cases/b256.json
docs/upstream/checkpoint-after-midblock-resume/cases/b1024.json
docs/upstream/checkpoint-after-midblock-resume/cases/mtp-b32.json
docs/upstream/checkpoint-after-midblock-resume/cases/nemotron-b1312.json`.
"""

from pathlib import Path

import pytest

from .mamba_align_replay import Case, assert_replay_holds, replay

pytestmark = pytest.mark.cpu_test

CASES = [
    # both-side-poison-unaligned-end-no-spec-internal-checkpoint: slot hashed as
    # state@32 holds state@16 (found with `vllm` against `vllm`)
    pytest.param(
        {
            "engine_args": {
                "mamba_block_size": 32,
                "block_size": 32,
                "prefix_match_unit": 16,
                "speculative_config": None,
                "prefix_cache_retention_interval": 0,
                "enable_mamba_shared_prefix_checkpoint": False,
            },
            "scheduler": {
                "max_num_batched_tokens": 2048,
                "long_prefill_token_threshold": 0,
                "max_num_seqs": 16,
            },
            "attention_block_size": 16,
            "prefill_checkpoint_alignment": 1,
            "num_kv_blocks": 1024,
            "step_budgets": [],
            "max_steps": 240,
            "seed": 0,
            "segments": {},
            "requests": [
                {"id": "r0", "prompt": [32], "max_tokens": 1},
                {"id": "r1", "prompt": [32], "max_tokens": 1, "continues": "r0"},
                {
                    "id": "r2",
                    "prompt": [16],
                    "arrival_step": 4,
                    "max_tokens": 4,
                    "continues": "r0",
                },
            ],
            "reference_costs": None,
        },
        id="b32",
    ),
    # both-side-poison-unaligned-end-no-spec-internal-checkpoint: slot hashed as
    # state@256 holds state@224 (found with `vllm` against `vllm`)
    pytest.param(
        {
            "engine_args": {
                "mamba_block_size": 256,
                "block_size": 256,
                "prefix_match_unit": 32,
                "speculative_config": None,
                "prefix_cache_retention_interval": 0,
                "enable_mamba_shared_prefix_checkpoint": False,
            },
            "scheduler": {
                "max_num_batched_tokens": 2048,
                "long_prefill_token_threshold": 0,
                "max_num_seqs": 16,
            },
            "attention_block_size": 256,
            "prefill_checkpoint_alignment": 1,
            "num_kv_blocks": 1024,
            "step_budgets": [],
            "max_steps": 1360,
            "seed": 0,
            "segments": {},
            "requests": [
                {"id": "r0", "prompt": [256], "max_tokens": 1},
                {"id": "r1", "prompt": [256], "max_tokens": 1, "continues": "r0"},
                {
                    "id": "r2",
                    "prompt": [128],
                    "arrival_step": 4,
                    "max_tokens": 4,
                    "continues": "r0",
                },
            ],
            "reference_costs": None,
        },
        id="b256",
    ),
    # both-side-poison-unaligned-end-no-spec-internal-checkpoint: slot hashed as
    # state@1024 holds state@992 (found with `vllm` against `vllm`)
    pytest.param(
        {
            "engine_args": {
                "mamba_block_size": 1024,
                "block_size": 1024,
                "prefix_match_unit": 32,
                "speculative_config": None,
                "prefix_cache_retention_interval": 0,
                "enable_mamba_shared_prefix_checkpoint": False,
            },
            "scheduler": {
                "max_num_batched_tokens": 2048,
                "long_prefill_token_threshold": 0,
                "max_num_seqs": 16,
            },
            "attention_block_size": 1024,
            "prefill_checkpoint_alignment": 1,
            "num_kv_blocks": 1024,
            "step_budgets": [],
            "max_steps": 5200,
            "seed": 0,
            "segments": {},
            "requests": [
                {"id": "r0", "prompt": [1024], "max_tokens": 1},
                {"id": "r1", "prompt": [1024], "max_tokens": 1, "continues": "r0"},
                {
                    "id": "r2",
                    "prompt": [512],
                    "arrival_step": 4,
                    "max_tokens": 4,
                    "continues": "r0",
                },
            ],
            "reference_costs": None,
        },
        id="b1024",
    ),
    # both-side-poison-unaligned-end-eagle-family-internal-checkpoint: slot hashed as
    # state@32 holds state@16 (found with `vllm` against `vllm`)
    pytest.param(
        {
            "engine_args": {
                "mamba_block_size": 32,
                "block_size": 32,
                "prefix_match_unit": 16,
                "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
                "prefix_cache_retention_interval": 0,
                "enable_mamba_shared_prefix_checkpoint": False,
            },
            "scheduler": {
                "max_num_batched_tokens": 2048,
                "long_prefill_token_threshold": 0,
                "max_num_seqs": 16,
            },
            "attention_block_size": 16,
            "prefill_checkpoint_alignment": 1,
            "num_kv_blocks": 1024,
            "step_budgets": [],
            "max_steps": 196,
            "seed": 0,
            "segments": {},
            "requests": [
                {"id": "r2", "prompt": [32], "max_tokens": 2},
                {"id": "r3", "prompt": [31], "max_tokens": 1, "continues": "r2"},
            ],
            "reference_costs": None,
        },
        id="mtp-b32",
    ),
    # both-side-poison-unaligned-end-no-spec-internal-checkpoint: slot hashed as
    # state@1312 holds state@1296 (found with `vllm` against `vllm`)
    pytest.param(
        {
            "engine_args": {
                "mamba_block_size": 1312,
                "block_size": 1312,
                "prefix_match_unit": 16,
                "speculative_config": None,
                "prefix_cache_retention_interval": 0,
                "enable_mamba_shared_prefix_checkpoint": False,
            },
            "scheduler": {
                "max_num_batched_tokens": 2048,
                "long_prefill_token_threshold": 0,
                "max_num_seqs": 16,
            },
            "attention_block_size": 1312,
            "prefill_checkpoint_alignment": 1,
            "num_kv_blocks": 1024,
            "step_budgets": [],
            "max_steps": 6640,
            "seed": 0,
            "segments": {},
            "requests": [
                {"id": "r0", "prompt": [1312], "max_tokens": 1},
                {"id": "r1", "prompt": [1312], "max_tokens": 1, "continues": "r0"},
                {
                    "id": "r2",
                    "prompt": [656],
                    "arrival_step": 4,
                    "max_tokens": 4,
                    "continues": "r0",
                },
            ],
            "reference_costs": None,
        },
        id="nemotron-b1312",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_mamba_align_replay(case: Case, tmp_path: Path) -> None:
    assert_replay_holds(case, replay(case, tmp_path))
