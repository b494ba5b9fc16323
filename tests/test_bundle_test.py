"""A crash bundle's test: ``test_regression.py`` and ``case.json`` in the bundle, the one harness in the store.

The bundle's test runs where vLLM and pytest are (gdnfuzz's modules blocked): it passes on the installed split
and fails on the split with the bug, as the single file ``export-test`` writes does; the store's harness is
written once and never through this repository's link to ``fuzz/report/mamba_align_replay.py``; an issue
shows the test and its case as that one file; the harness's model is the sim tier's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lifecycle_fixtures import real_bundle
from test_export import BLOCKER, _imports

from fuzz.report.exported_test import HARNESS, bundle_single_file, harness_text
from fuzz.report.issue import regression_test_expectation
from fuzz.store.bundle import CASE_FILE, HARNESS_FILE, TEST_FILE, load_bundle, store_as_found, store_harness

ROOT = Path(__file__).resolve().parent.parent
# Puts the pre-#51113 split on vLLM's Scheduler for the session: the bug the bundle's finding shows.
PRE_51113 = '''
import pytest

@pytest.fixture(autouse=True)
def buggy_split(monkeypatch):
    sys.meta_path.pop(0)
    from fuzz.model.policies import _pre_51113_split
    from vllm.v1.core.sched.scheduler import Scheduler
    monkeypatch.setattr(Scheduler, "_mamba_block_aligned_split", _pre_51113_split)
'''


def _pytest(bundle: Path, plugin: str) -> subprocess.CompletedProcess[str]:
    (bundle.parent / "conftest.py").write_text(BLOCKER + plugin)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(bundle / TEST_FILE)],
                          cwd=bundle.parent, env={"PATH": "/usr/bin:/bin", "HOME": str(bundle),
                                                  "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=600)


def test_a_bundles_test_carries_its_case_and_imports_the_stores_one_harness(tmp_path):
    bundle = real_bundle(tmp_path / "crashes")
    assert (tmp_path / "crashes" / HARNESS.name).read_text() == HARNESS.read_text()
    assert (bundle / CASE_FILE).is_file() and len((bundle / TEST_FILE).read_text().splitlines()) < 20
    passed = _pytest(bundle, "")
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout[-2000:]
    failed = _pytest(bundle, PRE_51113)
    assert failed.returncode == 1 and "AssertionError" in failed.stdout, failed.stdout[-2000:]


def test_an_issue_shows_the_bundles_test_as_one_file_that_imports_nothing_of_gdnfuzz(tmp_path):
    bundle = load_bundle(real_bundle(tmp_path / "crashes"))
    text = bundle_single_file(bundle.signature, regression_test_expectation(bundle), bundle.case)
    assert "case_test" not in text and "case.json" not in text and "CASE: Case = {" in text
    assert _imports(text) <= {"hashlib", "json", "array", "dataclasses", "pathlib", "typing", "pytest", "torch",
                              "vllm"}
    compile(text, TEST_FILE, "exec")


def test_the_stores_harness_is_rewritten_only_where_it_differs_and_never_through_a_link(tmp_path):
    store = tmp_path / "crashes"
    store.mkdir()
    (store / HARNESS.name).write_text("an older harness\n")
    store_harness(store, HARNESS.read_text())
    assert (store / HARNESS.name).read_text() == HARNESS.read_text()
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / HARNESS.name).symlink_to(HARNESS)
    store_harness(linked, HARNESS.read_text())  # this repository's crashes/: the link is the harness
    assert (linked / HARNESS.name).is_symlink()
    assert (ROOT / "crashes" / HARNESS.name).resolve() == HARNESS


def test_a_bundle_stored_as_found_brings_the_harness_its_test_imports(tmp_path):
    raw = real_bundle(tmp_path / "raw")
    stored = store_as_found(raw, tmp_path / "crashes", None)
    assert (stored / CASE_FILE).is_file() and (stored / TEST_FILE).is_file()
    assert (tmp_path / "crashes" / HARNESS_FILE).read_text() == HARNESS.read_text()


def test_the_harness_model_is_the_sim_tiers():
    from fuzz.model.scenario import load_scenario
    from fuzz.tiers import executor_for

    scenario, _ = load_scenario(ROOT / "corpus" / "regressions" / "pr51113-fragmented-first-chunk-single.json")
    configuration = executor_for("sim").configuration(scenario)
    assert harness_text(configuration) == HARNESS.read_text()
    with pytest.raises(AssertionError, match="not the sim tier's model"):
        harness_text({**configuration, "max_model_len": configuration["max_model_len"] // 2})
