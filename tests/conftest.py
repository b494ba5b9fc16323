"""Shared fixtures: the sim executor (one per session: it caches vLLM configs) and corpus paths."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"


@pytest.fixture(scope="session")
def sim():
    from workers.sim.executor import SimExecutor

    return SimExecutor()


def seed_case() -> Path:
    return CORPUS / "regressions" / "pr51113-fragmented-first-chunk.json"
