"""The atheris harness: vLLM's scheduler is instrumented, coverage grows, findings become bundles."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, seed_case

from fuzz.oracle.verdict import reference_is_wrong
from fuzz.search.settings import RunSettings
from fuzz.store.bundle import load_bundle

COV = re.compile(r"#\d+\s+(INITED|DONE)\s+cov: (\d+)")


def _env(tmp: Path, candidate: str) -> dict[str, str]:
    return RunSettings(candidate=candidate, corpus=tmp, crashes=tmp / "crashes", minimize_seconds=30).child_env()


@pytest.mark.slow
def test_coverage_of_vllm_grows(tmp_path):
    queue = tmp_path / "queue"
    queue.mkdir()
    out = subprocess.run([sys.executable, "-m", "fuzz.search.harness", "-runs=80", "-seed=5", "-max_len=16384", str(queue)],
                         env=_env(tmp_path, "vllm"), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    cov = dict(COV.findall(out.stderr))
    assert int(cov["DONE"]) > int(cov["INITED"]) > 500, cov  # thousands of vLLM edges, growing
    # vllm against vllm: the candidate brings nothing of its own; what is stored is vLLM's own bugs
    # (``both-side-``, the reference has them too), as the corpus records them.
    stored = [p.name for p in (tmp_path / "crashes").glob("*/")] if (tmp_path / "crashes").exists() else []
    assert all(reference_is_wrong(sig) for sig in stored), stored


@pytest.mark.slow
def test_run_saves_a_minimized_bundle_and_regression(tmp_path):
    """Run from a project whose own ``fuzz/`` and ``workers/`` packages would break any process that
    imported them: gdnfuzz's children (harness workers, the reducer) import gdnfuzz's (``fuzz.interpreter``)."""
    corpus = tmp_path / "corpus"
    (corpus / "seeds").mkdir(parents=True)
    shutil.copy(seed_case(), corpus / "seeds")
    project = tmp_path / "project"
    for package in ("fuzz", "workers"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f"raise ImportError('the project\'s own {package}')\n")
    out = subprocess.run(
        [sys.executable, "-P", "-m", "fuzz.cli", "run", "--candidate", "pre-51113", "--runs", "3", "--max-time", "0",
         "--corpus", str(corpus), "--crashes", str(tmp_path / "crashes"), "--minimize-time", "30", "--json",
         "--add-regressions"],
        cwd=project, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    record = json.loads(out.stdout.splitlines()[-1])  # --json: the run ends with one object on stdout
    assert record["exit_code"] == 1 and "split-eagle-drop-runs-past" in [s["signature"] for s in record["signatures"]]
    bundles = {d.name: load_bundle(d) for d in (tmp_path / "crashes").iterdir() if (d / "verdict.json").exists()}
    # the seed's finding (pre-51113 runs past the stop vLLM makes under EAGLE's block drop), minimized to
    # its one request; a mutation may also find pre-51113's other departure (it never defers)
    assert "split-eagle-drop-runs-past" in bundles and set(bundles) <= {"split-eagle-drop-runs-past",
                                                                        "split-runs-past-to-budget"}
    assert len(bundles["split-eagle-drop-runs-past"].scenario.requests) == 1
    assert all((corpus / "regressions" / f"{sig}.json").exists() for sig in bundles)
