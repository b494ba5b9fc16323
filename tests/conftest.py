"""Shared fixtures: the sim executor (one per session: it caches vLLM configs) and corpus paths; every test
leaves the environment as it found it (a command run in-process, e.g. ``replay --deadline 1``, sets
``$GDNFUZZ_DEADLINE_S`` for its children, which must not reach the next test's runs)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# Ray stays on 127.0.0.1 in every test (workers.campaign.loopback): set before any test module imports Ray.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Commands print plain lines here (stdout is captured), whatever colour settings the runner has: rich would take
# TTY_COMPATIBLE=1 or FORCE_COLOR for a terminal (fuzz.cli.terminal). A test of the terminal's output sets them.
os.environ.pop("TTY_COMPATIBLE", None)
os.environ.pop("FORCE_COLOR", None)
# Kept instrumentation (fuzz.search.coverage_cache) goes to a directory of this session, never the home.
if "GDNFUZZ_CACHE_DIR" not in os.environ:
    os.environ["GDNFUZZ_CACHE_DIR"] = tempfile.mkdtemp(prefix="gdnfuzz-test-cache-")
    atexit.register(shutil.rmtree, os.environ["GDNFUZZ_CACHE_DIR"], True)

import pytest

from fuzz.sandbox.scope import ambient

# A user's policy (a file, a module, a checkout) is loaded in a sandbox child of this session, as in every
# gdnfuzz process (fuzz.model.placement); the children end with the session.
ambient()

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"


@pytest.fixture(autouse=True)
def environment_restored():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def sim():
    from workers.sim.executor import SimExecutor

    return SimExecutor()


def seed_case() -> Path:
    return CORPUS / "regressions" / "pr51113-fragmented-first-chunk.json"
