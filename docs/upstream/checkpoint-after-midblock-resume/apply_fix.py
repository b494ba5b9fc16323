"""A pytest plugin that puts ``fix.py``'s split on vLLM's Scheduler for the session, so the regression test
can be run against the proposed fix without a patched vLLM:

    cd docs/upstream/checkpoint-after-midblock-resume && PYTHONPATH=. pytest -p apply_fix tests/v1/core
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def proposed_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's ``Scheduler._mamba_block_aligned_split`` replaced by the fixed one for each test."""
    from fix import split
    from vllm.v1.core.sched.scheduler import Scheduler

    monkeypatch.setattr(Scheduler, "_mamba_block_aligned_split", split)
