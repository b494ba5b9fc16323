"""The candidate process of whole-branch mode (``workers.sim.branch``): the checkout's scheduling code
served in place of the installed modules, scenarios run on the sim tier under the branch's own split.

Invariant: :class:`CheckoutFinder` is first on ``sys.meta_path`` before anything imports vLLM, so every
import of an overlaid module (``fuzz.model.checkout.overlay_modules``), by the branch or by the
installed vLLM, gets the checkout's file; no bytecode is written into the checkout.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType

from fuzz.errors import ConfigRejected
from fuzz.model.checkout import overlay_modules
from fuzz.model.scenario import Scenario
from workers.sim.branch import BranchError


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Serves the overlaid modules from the checkout; every other module comes from the installed vLLM."""

    def __init__(self, checkout: Path):
        self.modules = overlay_modules(checkout)

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        source = self.modules.get(fullname)
        if source is None:
            return None
        package = [str(source.parent)] if source.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(fullname, source, submodule_search_locations=package)


def _import_branch(finder: CheckoutFinder) -> None:
    """Import every overlaid module now, so a missing dependency is one clear error at start."""
    import vllm

    for name in sorted(finder.modules):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise BranchError(f"the branch's {name} needs what the installed vLLM {vllm.__version__} lacks: "
                              f"{exc.msg.splitlines()[0]}") from None
        except Exception as exc:
            raise BranchError(f"the branch's {name} fails to import on the installed vLLM {vllm.__version__}: "
                              f"{type(exc).__name__}: {exc}") from None


def serve(checkout: str, fd: int) -> None:
    """Child main: overlay the checkout, then run scenarios until EOF (replies: ok / rejected / error)."""
    sys.dont_write_bytecode = True
    finder = CheckoutFinder(Path(checkout))
    sys.meta_path.insert(0, finder)
    conn = Connection(fd)
    try:
        _import_branch(finder)
    except BranchError as exc:
        conn.send(("error", str(exc)))
        return
    from fuzz.model.policies import resolve_policy
    from workers.sim.executor import SimExecutor

    executor, branch_split = SimExecutor(), resolve_policy("vllm")
    conn.send(("ready", None))
    while True:
        try:
            scenario_dict = conn.recv()
        except EOFError:
            return
        try:
            result = executor.run(Scenario.from_dict(scenario_dict), branch_split)
            conn.send(("ok", result.to_dict()))
        except ConfigRejected as exc:
            conn.send(("rejected", str(exc)))
