"""A pytest plugin that puts ``fix.py``'s estimate on vLLM's MambaManager for the session, so the
regression test can be run against the proposed fix without a patched vLLM:

    cd docs/upstream/connector-pool-accounting && PYTHONPATH=. pytest -p apply_fix tests/v1/core
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def proposed_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's ``MambaManager.get_num_blocks_to_allocate`` replaced by the fixed one for each test."""
    from fix import get_num_blocks_to_allocate
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    monkeypatch.setattr(MambaManager, "get_num_blocks_to_allocate", get_num_blocks_to_allocate)
