"""A policy can never fake a verdict or hang a run (issue 15, items 1 and 3): whatever a split does
when called is a finding of the run, whatever its module does on import is one line and exit 2, and
every tier has a per-scenario deadline that ends in a ``hang`` finding naming the step."""

from __future__ import annotations

import json
import time

import pytest
from conftest import seed_case

from fuzz.cli import main
from fuzz.model.deadline import DEADLINE_ENV, DeadlineExceeded, run_deadline
from fuzz.model.policies import Policy, PolicyError, resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.sandbox.scope import deciding

POLICIES = '''
import time
def exits(self, request, n, a=0, b=0):
    raise SystemExit(0)
def interrupts(self, request, n, a=0, b=0):
    raise KeyboardInterrupt
def generator_exit(self, request, n, a=0, b=0):
    raise GeneratorExit
def nan(self, request, n, a=0, b=0):
    return float("nan")
def sleeps(self, request, n, a=0, b=0):
    time.sleep(10 ** 6)
    return n
'''


@pytest.fixture
def policies(tmp_path):
    path = tmp_path / "hostile.py"
    path.write_text(POLICIES)
    return path


@pytest.mark.parametrize(("name", "said"), [("exits", "raised SystemExit"), ("interrupts", "raised KeyboardInterrupt"),
                                            ("generator_exit", "raised GeneratorExit"), ("nan", "returned nan")])
def test_whatever_a_split_does_when_called_is_a_contract_finding(policies, capsys, name, said):
    code = main(["replay", str(seed_case()), "--candidate", f"{policies}:{name}", "--json"])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and row["verdict"] == "diverged"
    assert row["kind"].startswith("contract: split") and said in row["kind"]


@pytest.mark.parametrize(("body", "reason"), [
    ("import sys\nsys.exit(3)", "failed to load (SystemExit: 3)"),
    ("import sys\nsys.exit(0)", "failed to load (SystemExit: 0)"),
    ("import os\nos._exit(0)", "the process loading it exited (exit code 0)"),
    ("import os\nos._exit(3)", "the process loading it exited (exit code 3)"),
    ("raise KeyboardInterrupt", "failed to load (KeyboardInterrupt"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "the process loading it was killed by SIGKILL"),
])
def test_a_policy_module_that_exits_on_import_is_one_line_and_exit_2(tmp_path, capsys, body, reason):
    path = tmp_path / "exits_on_import.py"
    path.write_text(f"{body}\ndef split(self, request, n, a=0, b=0):\n    return n\n")
    assert main(["replay", str(seed_case()), "--candidate", f"{path}:split"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and reason in err, err


def test_a_module_policy_is_loaded_in_the_sandbox_too(tmp_path, monkeypatch):
    (tmp_path / "exits_module.py").write_text("import os\nos._exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with deciding(), pytest.raises(PolicyError, match="the process loading it exited"):
        resolve_policy("exits_module:split")


def test_a_split_that_sleeps_forever_is_a_hang_finding_naming_its_step(policies, capsys):
    code = main(["replay", str(seed_case()), "--candidate", f"{policies}:sleeps", "--deadline", "1", "--json"])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and row["kind"].startswith("hang: the run passed its 1 s deadline in step 0")
    assert row["first_step"] == 0 and row["side"] == "candidate"


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "soon"])
def test_the_deadline_flag_is_checked(capsys, value):
    with pytest.raises(SystemExit) as caught:  # argparse's usage error
        main(["replay", str(seed_case()), "--deadline", value])
    assert caught.value.code == 2 and "--deadline: expected a positive number of seconds" in capsys.readouterr().err


def test_a_late_deadline_signal_after_the_run_is_ignored():
    with run_deadline(0.05) as armed:
        assert armed
    time.sleep(0.2)  # the watchdog was cancelled; nothing may fire now
    with pytest.raises(DeadlineExceeded), run_deadline(0.05):
        time.sleep(5)
    with run_deadline(0.05), run_deadline(5) as inner:
        assert inner is False  # the outer deadline governs


def test_the_kernel_tier_reports_a_hang_naming_its_step(sim, monkeypatch):
    from workers.kernels.executor import KernelExecutor
    from workers.kernels.schedule import ScheduleEntry, request_tokens

    scenario, _ = load_scenario(seed_case())
    vllm = resolve_policy("vllm")
    result = sim.run(scenario, vllm)
    executor = KernelExecutor(backend="torch", schedules=[ScheduleEntry(scenario, result, request_tokens(scenario, result))])
    forward = executor._forward  # every kernel call of a replay goes through it

    def slow_kernel(*args, **kwargs):  # a kernel that takes far longer than the deadline
        time.sleep(5)
        return forward(*args, **kwargs)

    monkeypatch.setattr(executor, "_forward", slow_kernel)
    monkeypatch.setenv(DEADLINE_ENV, "0.2")
    run = executor.run(scenario, vllm)
    assert [f.kind for f in run.faults] == ["hang"] and run.faults[0].step == result.steps[0].step


def test_the_sim_tier_reports_a_hang_through_the_protocol(sim, policies, monkeypatch):
    scenario, _ = load_scenario(seed_case())
    monkeypatch.setenv(DEADLINE_ENV, "0.5")
    sleeper = resolve_policy(f"{policies}:sleeps")
    run = sim.run(scenario, Policy(sleeper.name, sleeper.spec, sleeper.split))
    assert [f.kind for f in run.faults] == ["hang"] and run.faults[0].step == 0


def test_a_worker_waits_out_a_sandbox_childs_whole_teardown_before_it_calls_a_run_stuck():
    """The interrupted run's way out may include stopping the candidate's child (the keeper's kill rounds, then
    the reap): on a loaded machine that is slow, and must not read as the code under test catching the interrupt
    (a ``hang-ignored-its-deadline`` bundle and a dead worker, where the input is an ordinary ``hang``)."""
    from fuzz.model.deadline import STUCK_GRACE_S
    from fuzz.sandbox.channel import REAP_S
    from fuzz.sandbox.containment import KILL_ROUNDS_S

    assert STUCK_GRACE_S > KILL_ROUNDS_S + REAP_S
