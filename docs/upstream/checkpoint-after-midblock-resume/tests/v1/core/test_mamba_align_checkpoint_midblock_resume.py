# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Mamba "align" prefix caching, replayed on request mixes that gdnfuzz found by
fuzzing vLLM's scheduler: `mamba_align_replay.suite_test` replays each case of
`test_mamba_align_checkpoint_midblock_resume.json` through the installed vLLM's real
Scheduler and KV-cache manager and asserts what that module states.

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

import pytest

from .mamba_align_replay import suite_test

pytestmark = pytest.mark.cpu_test

test_mamba_align_replay = suite_test(__file__)
