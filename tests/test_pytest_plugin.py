"""The pytest11 plugin: a corpus as test items, in a project of its own (pytester, a subprocess)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parent.parent
FILE = ROOT / "corpus" / "regressions" / "pr51113-concurrent-prefills.json"


@pytest.mark.slow
def test_corpus_items_fail_on_the_bug_pass_on_the_fix_and_stay_out_of_the_way(pytester):
    pytester.makepyfile(test_own="def test_own():\n    assert True\n")
    corpus = pytester.path / "corpus"
    corpus.mkdir()
    shutil.copyfile(FILE, corpus / FILE.name)
    alone = pytester.runpytest_subprocess("-q")
    alone.assert_outcomes(passed=1)
    run = pytester.runpytest_subprocess("-q", "-m", "gdnfuzz", "--gdnfuzz-corpus", str(corpus),
                                        "--gdnfuzz-candidate", "pre-51113", "--gdnfuzz-candidate", "vllm", "-rA")
    run.assert_outcomes(passed=1, failed=1, deselected=1)
    text = run.stdout.str()
    assert f"gdnfuzz[pre-51113:{FILE.name}]" in text and f"gdnfuzz[vllm:{FILE.name}]" in text
    assert "verdict diverged" in text and "reproduce: gdnfuzz replay" in text
