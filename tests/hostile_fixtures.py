"""Hostile candidates: a split that calls ``os._exit(0)`` or loops while swallowing every exception, in its
body, in a default argument or at import; as a policy file or as a vLLM checkout (issue 24's cases); and
splits whose module tries to forge what judges them (issue 34's, :data:`FORGERIES`)."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from checkout_fixtures import SCHEDULER, make_checkout, replace_split

from fuzz.model.policies import _pre_51113_split

SIGNATURE = "(self, request, num_new_tokens, num_new_local_computed_tokens=0, num_external_computed_tokens=0"
EXITS = "__import__('os')._exit(0)"
# A loop the in-process deadline cannot end: it swallows DeadlineExceeded with everything else.
SWALLOWS = "exec('while True:\\n try: __import__(\"time\").sleep(0.01)\\n except BaseException: pass')"


def split_source(name: str, act: str, where: str) -> str:
    """A split named ``name`` that does ``act`` in its body, in a default argument, or at import."""
    if where == "body":
        return f"def {name}{SIGNATURE}):\n    {act}\n    return num_new_tokens\n"
    if where == "default":
        return f"def {name}{SIGNATURE}, _hostile={act}):\n    return num_new_tokens\n"
    return f"{act}\ndef {name}{SIGNATURE}):\n    return num_new_tokens\n"


def hostile_file(directory: Path, act: str, where: str) -> str:
    """A policy file ``hostile_<where>.py`` in ``directory``; its spec."""
    path = directory / f"hostile_{where}.py"
    path.write_text(split_source("split", act, where))
    return f"{path}:split"


def hostile_checkout(root: Path, act: str, where: str) -> Path:
    """A checkout of the installed vLLM's files whose split is the hostile one."""
    make_checkout(root)
    replace_split(root, textwrap.indent(split_source("_mamba_block_aligned_split", act, where), "    "))
    return root


# ---------------------------------------------------------------- forgeries (issue 34)
# Each is a pre-#51113 split (so an honest verdict is "diverged": the seed regression's slot is poisoned) whose
# module, at import, tries to change what judges it. Against gdnfuzz before issue 34 each gave exit 0; now the
# candidate's process holds nothing that judges: what it can change is its own answers.
FORGERIES = {
    # rewrite the sandbox child's request handler so a run goes through vLLM's own split instead
    "handler": """
import fuzz.sandbox.child as _child
def _forged_run(request):
    from fuzz.model.policies import resolve_policy
    from fuzz.model.scenario import Scenario
    from fuzz.tiers import local_executor
    return {"run": local_executor(request["tier"]).run(Scenario.from_dict(request["scenario"]),
                                                       resolve_policy("vllm")).to_dict()}
_child.OPS["run"] = _forged_run
""",
    # patch the run record this process sends: no poisoned slot, no fault, every output as expected
    "record": """
from fuzz.model.result import RunResult as _RunResult
_to_dict = _RunResult.to_dict
def _forged_to_dict(self):
    data = _to_dict(self)
    data["poisoned"], data["faults"], data["disagreement"] = [], [], None
    for outcome in data.get("requests", {}).values():
        outcome["resume_state_ok"] = True if outcome.get("resume_state_ok") is not None else None
        outcome["output_tokens"] = list(outcome.get("expected_tokens") or outcome.get("output_tokens") or [])
    return data
_RunResult.to_dict = _forged_to_dict
""",
    # an honest candidate's convenience: it installs a split on vLLM's Scheduler class (whatever reads vLLM's
    # split in the same interpreter, a reference or a root-cause probe, then runs that one)
    "leak": """
def _install():
    from vllm.v1.core.sched.scheduler import Scheduler
    from fuzz.model.policies import _pre_51113_split
    Scheduler._mamba_block_aligned_split = _pre_51113_split
_install()
""",
    # patch the correctness judge of a fuzzing worker that imports it (and the handler, for the corpus replay)
    "judge": """
import fuzz.search.harness as _harness
_harness.finding_signature = lambda *args, **kwargs: "clean"
import fuzz.sandbox.child as _child
def _forged_run(request):
    from fuzz.model.policies import resolve_policy
    from fuzz.model.scenario import Scenario
    from fuzz.tiers import local_executor
    return {"run": local_executor(request["tier"]).run(Scenario.from_dict(request["scenario"]),
                                                       resolve_policy("vllm")).to_dict()}
_child.OPS["run"] = _forged_run
""",
    # write a forged answer on the channel socket, found through /proc/self/fd: a clean run of the scenario
    # being run (found on the stack), then leave
    "socket": """
def _forge_on_the_channel():
    import inspect, json, os
    line = b'{"run": {}}\\n'
    for info in inspect.stack():
        request = info.frame.f_locals.get("request")
        if isinstance(request, dict) and "scenario" in request:
            from fuzz.model.policies import resolve_policy
            from fuzz.model.scenario import Scenario
            from workers.sim.executor import SimExecutor
            clean = SimExecutor().run(Scenario.from_dict(request["scenario"]), resolve_policy("vllm")).to_dict()
            line = json.dumps({"run": clean}).encode() + b"\\n"
            break
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                os.write(int(fd), line)
        except OSError:
            pass
    os._exit(0)
""",
}


def forging_source(name: str, how: str, where: str = "module") -> str:
    """The pre-#51113 split as ``name`` with the forgery ``how`` at import (``where`` ``module``) or in a default
    argument (``default``: what a split-only checkout's compiled method evaluates), run at the split's first
    call for ``socket``."""
    split = inspect.getsource(_pre_51113_split).replace("def _pre_51113_split(", f"def {name}(", 1)
    if how == "socket":
        split = split.replace('    """The split before', '    _forge_on_the_channel()\n    """The split before', 1)
    if where == "default":
        split = split.replace("num_external_computed_tokens: int = 0)",
                              f"num_external_computed_tokens: int = 0, _forged: Any = exec({FORGERIES[how]!r}, "
                              "globals()))", 1)
        return f"from typing import Any\n{split}\n"
    return f"from typing import Any\n{FORGERIES[how]}\n{split}\n"


def forging_file(directory: Path, how: str) -> str:
    """A policy file forging ``how`` in ``directory``; its spec."""
    path = directory / f"forging_{how}.py"
    path.write_text(forging_source("split", how))
    return f"{path}:split"


def forging_checkout(root: Path, how: str, where: str = "default") -> Path:
    """A checkout of the installed vLLM's files whose split forges ``how``: in a default argument of the method
    (``default``: what the split-only form evaluates) or at module level of ``scheduler.py`` (``module``: what
    the code-change form imports, as a PR's own code would carry it)."""
    make_checkout(root)
    source = forging_source("_mamba_block_aligned_split", how, where)
    module_part, _, method = source.partition("def _mamba_block_aligned_split(")
    replace_split(root, textwrap.indent("def _mamba_block_aligned_split(" + method, "    "))
    if where == "module":
        scheduler = root / SCHEDULER
        scheduler.write_text(scheduler.read_text() + "\n" + module_part.replace("from typing import Any\n", ""))
    return root
