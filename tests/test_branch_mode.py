"""Whole-branch mode: a checkout's scheduling code in a candidate process, against the installed vLLM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from checkout_fixtures import MAMBA_HIT_OFF_BY_ONE, MAMBA_MANAGER, SCHEDULER, edit, make_checkout, replace_split

from fuzz.errors import InputError
from fuzz.model.checkout import changed_files
from fuzz.model.policies import resolve_policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.tiers import executor_for

ROOT = Path(__file__).resolve().parent.parent
# The planted MambaManager bug needs a partial hash hit to show; this regression has one.
PARTIAL = ROOT / "corpus" / "regressions" / "pr51113-resume-at-3011-partial.json"
SCENARIO, _ = load_scenario(PARTIAL)
IMPORTS = "from vllm.v1.request import Request, RequestStatus, StreamingUpdate\n"  # a line of the scheduler's


def scheduler_edited(root: Path, old: str, new: str) -> Path:
    """A checkout at ``root`` of the installed vLLM's scheduling code, ``old`` made ``new`` in its scheduler."""
    edit(make_checkout(root), SCHEDULER, old, new)
    return root


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    root = make_checkout(tmp_path_factory.mktemp("planted"))
    edit(root, MAMBA_MANAGER, *MAMBA_HIT_OFF_BY_ONE)
    return root


@pytest.mark.slow
def test_branch_mode_finds_a_mamba_manager_bug_that_split_mode_cannot_see(planted):
    reference = resolve_policy("vllm")
    split_only = replay(SCENARIO, resolve_policy(str(planted)), reference, "sim")
    assert split_only.verdict.status == VerdictStatus.CLEAN  # the split is the installed one: nothing to see
    branch = replay(SCENARIO, resolve_policy(f"branch:{planted}"), reference, "sim")
    assert branch.verdict.status == VerdictStatus.DIVERGED
    assert branch.verdict.headline.side == "candidate"
    assert [c.path for c in changed_files(planted)] == [MAMBA_MANAGER]
    assert not list(planted.rglob("__pycache__"))  # nothing written into the checkout


@pytest.mark.slow
def test_an_unchanged_checkout_in_branch_mode_is_a_null_run(tmp_path):
    root = make_checkout(tmp_path / "same")
    replayed = replay(SCENARIO, resolve_policy(f"branch:{root}"), resolve_policy("vllm"), "sim")
    assert replayed.verdict.status == VerdictStatus.CLEAN
    assert replayed.candidate.requests == replayed.reference.requests


@pytest.mark.slow
def test_a_branch_needing_what_the_installed_vllm_lacks_is_one_line_exit_2(tmp_path):
    root = scheduler_edited(tmp_path / "newer", IMPORTS, IMPORTS + "from vllm.utils import helper_only_on_main\n")
    with pytest.raises(InputError) as raised:
        replay(SCENARIO, resolve_policy(f"branch:{root}"), resolve_policy("vllm"), "sim")
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and "helper_only_on_main" in message
    assert "needs what the installed vLLM 0.32.0 lacks: cannot import name" in message
    assert raised.value.exit_code == 2
    executor_for("sim").close()


@pytest.mark.slow
def test_a_branch_that_loops_while_loading_is_one_line_exit_2_within_its_bound(tmp_path):
    from workers.sim.branch import BranchError, BranchRunner

    root = scheduler_edited(tmp_path / "loops", IMPORTS, IMPORTS + "while True:\n    pass\n")
    runner = BranchRunner(str(root), start_timeout=20)
    with pytest.raises(BranchError) as raised:
        runner.scheduler(SCENARIO, 1024, {}, lambda request, detail: None)
    assert "the process loading the branch did not start within 20 s and was killed" in str(raised.value)
    assert raised.value.exit_code == 2
    assert not runner.child.alive


@pytest.mark.slow
def test_a_branch_that_exits_while_splitting_is_a_process_exit_fault_never_a_run(tmp_path):
    from workers.sim.executor import SimExecutor

    root = scheduler_edited(tmp_path / "exits", "    def _mamba_block_aligned_split(\n",
                            "    def _mamba_block_aligned_split(*args, **kwargs):\n        import os\n        os._exit(0)\n\n"
                            "    def _unused_split(\n")
    executor = SimExecutor()
    result = executor.run(SCENARIO, resolve_policy(f"branch:{root}"))
    assert [f.kind for f in result.faults] == ["process-exit"] and result.faults[0].step == 0
    assert "exited (exit code 0) during this run" in result.faults[0].detail
    assert not any(outcome.output_tokens for outcome in result.requests.values())  # nothing ran past the split
    executor.close()


def test_changed_files_read_binary_sources_and_never_open_a_fifo(tmp_path):
    root = make_checkout(tmp_path / "checkout")
    (root / "vllm" / "v1" / "core" / "blob.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    os.mkfifo(root / "vllm" / "v1" / "core" / "pipe.py")
    assert [c.path for c in changed_files(root)] == ["vllm/v1/core/blob.py"]


UNFIT_SPLIT = '''    def _mamba_block_aligned_split(self, request, num_new_tokens, num_new_local_computed_tokens=0,
                                   num_external_computed_tokens=0):
        return min(num_new_tokens, self.lookahead_only_on_main)
'''


@pytest.mark.slow
def test_a_checkout_reaching_for_what_the_installed_vllm_lacks_while_running_is_one_line_exit_2(tmp_path):
    """Not a finding: an attribute of an installed vLLM object, asked for by the checkout's code (0.33.0's
    scheduler over 0.32.0 asks ``SpeculativeConfig.needs_eagle_block_drop``), in either mode."""
    import vllm

    root = scheduler_edited(tmp_path / "newer", "        self.vllm_config = vllm_config\n",
                            "        self.vllm_config = vllm_config\n        vllm_config.lookahead_only_on_main\n")
    with pytest.raises(InputError) as raised:
        replay(SCENARIO, resolve_policy(f"branch:{root}"), resolve_policy("vllm"), "sim")
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and raised.value.exit_code == 2
    assert message.startswith(f"branch:{root}: vllm/v1/core/sched/scheduler.py:")
    assert message.endswith(f"needs VllmConfig.lookahead_only_on_main, which the installed vLLM {vllm.__version__} lacks")
    executor_for("sim").close()

    split_only = make_checkout(tmp_path / "split")
    replace_split(split_only, UNFIT_SPLIT)
    with pytest.raises(InputError, match=r"scheduler\.py:\d+ needs Scheduler\.lookahead_only_on_main, which the "):
        replay(SCENARIO, resolve_policy(str(split_only)), resolve_policy("vllm"), "sim")


@pytest.mark.slow
def test_a_checkout_missing_an_attribute_of_its_own_objects_is_still_its_finding(tmp_path):
    root = make_checkout(tmp_path / "buggy")
    replace_split(root, UNFIT_SPLIT.replace("self.lookahead_only_on_main", "request.typo_of_the_branch"))
    replayed = replay(SCENARIO, resolve_policy(f"branch:{root}"), resolve_policy("vllm"), "sim")
    assert replayed.verdict.status == VerdictStatus.DIVERGED  # the branch's own Request lacks it: its bug
    assert "typo_of_the_branch" in replayed.verdict.summary
    executor_for("sim").close()


DELTA = ROOT / "tests" / "data" / "branch_delta"  # batch scenarios whose Mamba index entries are evicted and moved


@pytest.mark.slow
def test_the_branchs_step_reports_are_deltas_that_rebuild_exactly_the_installed_run(tmp_path, monkeypatch):
    """Each ``update`` carries only what changed (requests, index entries, and the index's order only where
    applying the delta would not give it); the run the deciding process rebuilds from them is, field for
    field, the installed scheduler's own run of the same scenario (an unchanged checkout)."""
    import workers.sim.branch as branch

    sent = {"updates": 0, "states": 0, "reordered": 0}
    exchange = branch.BranchRunner.exchange

    def counted(self, message):
        answer = exchange(self, message)
        if message["op"] == "update":
            sent["updates"] += 1
            sent["states"] += len(answer["requests"])
            sent["reordered"] += answer["order"] is not None
        return answer

    monkeypatch.setattr(branch.BranchRunner, "exchange", counted)
    root = make_checkout(tmp_path)
    executor = executor_for("sim")
    requests = 0
    for path in sorted(DELTA.glob("*.json")):
        scenario, _ = load_scenario(path)
        branch_run = executor.run(scenario, resolve_policy(f"branch:{root}")).to_dict()
        installed = executor.run(scenario, resolve_policy("vllm")).to_dict()
        branch_run.pop("policy"), installed.pop("policy")
        assert branch_run == installed, path.name
        requests += len(scenario.requests) * len(branch_run["steps"])
    executor.close()
    assert sent["reordered"] >= 1  # the order path ran, and still rebuilt the index exactly
    assert sent["states"] < requests  # unchanged requests were not sent again


@pytest.mark.slow
def test_a_branch_process_left_open_is_stopped_and_its_scratch_removed_at_exit(tmp_path):
    """A command that exits with its executor open (never calling ``close``) leaves no scratch directory."""
    import subprocess
    import sys

    root = make_checkout(tmp_path / "open")
    script = ("import sys\nfrom workers.sim.branch import BranchRunner\nrunner = BranchRunner(sys.argv[1])\n"
              "runner._start()\nprint(runner.child.scratch, flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    scratch = Path(done.stdout.strip().splitlines()[-1])
    assert scratch.name.startswith("gdnfuzz-scratch-") and not scratch.exists()
