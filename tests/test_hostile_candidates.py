"""A candidate can never fake a pass (issue 24): its code runs in sandbox children, never in the process
that decides, so ``os._exit(0)`` or a loop that swallows every exception, in the split's body, in a
default argument or at import, makes ``replay``, ``ci``, ``run`` and ``bisect`` fail (never exit 0),
with their reports written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from checkout_fixtures import SCHEDULER, committed_checkout
from conftest import seed_case
from hostile_fixtures import EXITS, SWALLOWS, hostile_checkout, hostile_file
from lifecycle_fixtures import real_bundle

from fuzz.cli import main
from fuzz.model.policies import CandidateGone, resolve_policy
from fuzz.sandbox.scope import deciding

ROOT = Path(__file__).resolve().parent.parent
@pytest.mark.slow
def test_a_split_that_exits_the_process_is_a_finding_of_its_run(tmp_path, capsys):
    code = main(["replay", str(seed_case()), "--candidate", hostile_file(tmp_path, EXITS, "body"), "--json"])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and row["verdict"] == "diverged" and row["side"] == "candidate"
    assert row["signature"].startswith("process-exit") and "exited (exit code 0)" in row["kind"]


@pytest.mark.slow
def test_a_split_that_swallows_the_deadline_is_killed_and_a_hang(tmp_path, capsys):
    code = main(["replay", str(seed_case()), "--candidate", hostile_file(tmp_path, SWALLOWS, "body"),
                 "--deadline", "2", "--json"])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the deciding process's own deadline ends its wait for the answer (and the child with it)
    assert code == 1 and row["signature"].startswith("hang") and "passed its 2 s deadline" in row["kind"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["default", "import"])
def test_a_policy_that_exits_while_loading_is_exit_2(tmp_path, capsys, where):
    assert main(["replay", str(seed_case()), "--candidate", hostile_file(tmp_path, EXITS, where)]) == 2
    assert "the process loading it exited (exit code 0)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_deciding_process_only_asks_a_sandboxed_split_for_its_answer(tmp_path):
    with deciding():
        policy = resolve_policy(hostile_file(tmp_path, EXITS, "body"))
        assert policy.sandboxed and policy.defined_at() == (str(tmp_path / "hostile_body.py"), 1)
        with pytest.raises(CandidateGone) as gone:  # the split's os._exit(0) ends its child, never this process
            policy.split(None, None, 1)
    assert gone.value.kind == "process-exit" and "exited (exit code 0)" in gone.value.detail


@pytest.mark.slow
@pytest.mark.parametrize(("where", "code", "case"), [("body", 1, "process-exit"), ("default", 2, "policy-not-loadable")])
def test_ci_fails_and_writes_its_reports(tmp_path, capsys, where, code, case):
    checkout = hostile_checkout(tmp_path / "checkout", EXITS, where)
    corpus = tmp_path / "corpus"
    (corpus / "regressions").mkdir(parents=True)
    shutil.copy(seed_case(), corpus / "regressions")
    out = tmp_path / "out"
    assert main(["ci", "--candidate", str(checkout), "--corpus", str(corpus), "--fuzz-time", "0",
                 "--out", str(out)]) == code
    junit = (out / "junit.xml").read_text()
    assert 'failures="1"' in junit and case in junit
    assert case in (out / "summary.md").read_text() and (out / "gdnfuzz.sarif").is_file()


@pytest.mark.slow
def test_ci_with_a_candidate_that_hangs_stops_at_its_time_bound_with_its_reports(tmp_path, capsys):
    """Its split loops, swallowing the per-scenario deadline (which would take 135 s a file to kill it):
    the overall bound cuts the replay in flight, and every file left is reported as not judged."""
    checkout = hostile_checkout(tmp_path / "checkout", SWALLOWS, "body")
    corpus = tmp_path / "corpus"
    (corpus / "regressions").mkdir(parents=True)
    for name in ("a.json", "b.json"):
        shutil.copy(seed_case(), corpus / "regressions" / name)
    out = tmp_path / "out"
    assert main(["ci", "--candidate", str(checkout), "--corpus", str(corpus), "--max-time", "35",
                 "--fuzz-time", "0", "--out", str(out)]) == 5
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**gdnfuzz: ERROR**") and "time bound (--max-time 35s) was reached" in summary
    junit = (out / "junit.xml").read_text()
    assert 'type="gdnfuzz.not-judged"' in junit or 'type="gdnfuzz.infrastructure"' in junit  # replaying, or loading
    assert json.loads((out / "gdnfuzz.sarif").read_text())["runs"][0]["invocations"][0]["executionSuccessful"] is False


def fuzz_with(tmp_path: Path, act: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``gdnfuzz run`` for 5 inputs from the seed with a split doing ``act`` in its body."""
    corpus = tmp_path / "corpus"
    (corpus / "seeds").mkdir(parents=True)
    shutil.copy(seed_case(), corpus / "seeds")
    return subprocess.run(
        [sys.executable, "-m", "fuzz.cli", "run", "--candidate", hostile_file(tmp_path, act, "body"), "--runs", "5",
         "--max-time", "0", "--corpus", str(corpus), "--crashes", str(tmp_path / "crashes")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, **env})


def stored_kinds(tmp_path: Path) -> set[str]:
    """The fault kinds of the bundles a run stored (``hang``, ``process-exit``...), each bundle holding its
    scenario. Every input of such a run meets the same fault, but a mutation that changes the engine's
    configuration changes the signature's suffix (``hang-eagle-family-partial-hits``, ``hang-no-spec``): one
    bundle each."""
    bundles = [d for d in (tmp_path / "crashes").iterdir() if (d / "verdict.json").exists()]
    assert bundles
    for bundle in bundles:
        assert json.loads((bundle / "scenario.json").read_text())["requests"]
    return {json.loads((bundle / "verdict.json").read_text())["kind"] for bundle in bundles}


@pytest.mark.slow
def test_run_stores_a_split_that_exits_as_a_finding_and_its_worker_goes_on(tmp_path):
    out = fuzz_with(tmp_path, EXITS)
    assert out.returncode == 1, out.stderr[-2000:]
    assert stored_kinds(tmp_path) == {"process-exit"}  # the candidate's child exited, not the worker
    assert not (tmp_path / "crashes" / "harness-crashes.log").exists()


@pytest.mark.slow
def test_run_stores_an_input_whose_split_swallows_the_deadline_as_a_hang(tmp_path):
    out = fuzz_with(tmp_path, SWALLOWS, GDNFUZZ_DEADLINE_S="2")
    assert out.returncode == 1, out.stderr[-2000:]
    assert stored_kinds(tmp_path) == {"hang"}  # the worker's wait ends at the deadline; its child killed
    assert not (tmp_path / "crashes" / "harness-crashes.log").exists()


@pytest.mark.slow
def test_bisect_over_a_revision_that_exits_is_not_a_pass(tmp_path, capsys):
    repo = tmp_path / "vllm"
    hostile_checkout(tmp_path / "hostile", EXITS, "body")
    git = committed_checkout(repo, tmp_path / "hostile" / SCHEDULER, "a split that exits")
    bundle = real_bundle(tmp_path / "crashes")
    bad = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert main(["bisect", str(bundle), "--checkout", str(repo), "--good", "HEAD~1", "--bad", "HEAD"]) == 2
    assert "--bad" in capsys.readouterr().err
    assert not list(Path(tempfile.gettempdir()).glob(f"gdnfuzz-rev-{bad[:12]}-*"))  # no checkout left behind
