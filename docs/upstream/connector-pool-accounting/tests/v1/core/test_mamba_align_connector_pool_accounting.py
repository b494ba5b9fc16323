# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Mamba "align" prefix caching, replayed on request mixes that gdnfuzz found by
fuzzing vLLM's scheduler: `mamba_align_replay.suite_test` replays each case of
`test_mamba_align_connector_pool_accounting.json` through the installed vLLM's real
Scheduler and KV-cache manager and asserts what that module states.

Each case is a bug of vLLM itself (MambaManager's align-mode estimate is one block short
when a synchronous KV-connector load is followed by a chunk that crosses into a new
block column): every case fails on vLLM 0.32.0 and 0.33.0 with the ValueError that
schedule() raises, and passes once the estimate counts that block.

Written by `gdnfuzz export-test --suite
docs/upstream/connector-pool-accounting/cases/connector-pool-accounting-valueerror-no-spec.json
docs/upstream/connector-pool-accounting/cases/connector-pool-accounting-valueerror.json`.
"""

import pytest

from .mamba_align_replay import suite_test

pytestmark = pytest.mark.cpu_test

test_mamba_align_replay = suite_test(__file__)
