"""The corpus and the fidelity guard on every other vLLM set up beside this one.

``scripts/setup.sh --vllm VERSION`` makes ``.venv-vllm-VERSION`` at the repository root: that vLLM's
scheduling code over this environment's CPU stack. In each one found, the tests that read the installed
vLLM's behaviour (the corpus expectations per version, the fidelity guard, the knobs that version
reads, the expectations' reading) run again in its own interpreter, so every version's expectations are
checked on that version. ``GDNFUZZ_VLLM_MATRIX`` (space-separated versions: ``.ci/run`` sets it) names
versions that must be there; without it a missing environment is a skip that says how to make one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("GDNFUZZ_VLLM_MATRIX", "").split()
FOUND = sorted(p.name.removeprefix(".venv-vllm-") for p in ROOT.glob(".venv-vllm-*") if (p / "bin" / "python").exists())
PER_VERSION = ["tests/test_corpus.py", "tests/test_fidelity.py", "tests/test_knobs.py", "tests/test_expectations.py",
               "tests/test_vllm_build.py"]


def test_every_required_version_is_set_up():
    missing = [v for v in REQUIRED if v not in FOUND]
    assert not missing, f"no .venv-vllm-{missing[0]}: run scripts/setup.sh --vllm {missing[0]}"
    if not FOUND:
        pytest.skip("no other vLLM set up beside this one (scripts/setup.sh --vllm 0.33.0 makes one)")


@pytest.mark.slow  # another interpreter importing vLLM and replaying the corpus: a minute or more
@pytest.mark.parametrize("version", FOUND)
def test_the_corpus_and_the_mirror_hold_on_that_version(version):
    python = ROOT / f".venv-vllm-{version}" / "bin" / "python"
    installed = subprocess.run([python, "-c", "from fuzz.model.vllm_build import installed_vllm; "
                                "print(installed_vllm().version)"], cwd=ROOT, capture_output=True, text=True)
    assert installed.stdout.strip() == version, installed.stderr[-2000:]
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
                           "-m", "not slow", *PER_VERSION], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "CI": "true"})  # the fidelity guard strict, as in CI
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
