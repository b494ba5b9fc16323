"""The candidate process of whole-branch mode (``workers.sim.branch``): the checkout's scheduling code
served in place of the installed modules, scenarios run on the sim tier under the branch's own split.

``python -m workers.sim.branch_child FD CHECKOUT``; over ``fuzz.sandbox.channel``: ready is ``{}`` or
``{"error": one line}``; each ``{"scenario": {...}}`` is answered ``{"run": RunResult}``,
``{"rejected": one line}``, ``{"unfit": one line}`` (the branch reached for what the installed vLLM lacks:
``fuzz.model.checkout.CheckoutMismatch``) or ``{"error": one line}``.

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
from pathlib import Path
from types import ModuleType
from typing import Any

from fuzz.errors import ConfigRejected
from fuzz.model.checkout import CheckoutMismatch, overlay_modules, unfit_for_installed
from fuzz.model.scenario import Scenario
from fuzz.sandbox.channel import serve
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


def main(fd: int, checkout: str) -> None:
    """Overlay the checkout, load the branch (its failure is the ready line), then run scenarios until EOF."""
    sys.dont_write_bytecode = True
    finder = CheckoutFinder(Path(checkout))
    sys.meta_path.insert(0, finder)
    runner: dict[str, Any] = {}

    def ready() -> dict[str, Any]:
        try:
            _import_branch(finder)
        except BranchError as exc:
            return {"error": str(exc)}
        from fuzz.model.policies import resolve_policy
        from workers.sim.executor import SimExecutor

        runner.update(executor=SimExecutor(), split=resolve_policy("vllm"))
        return {}

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        if not runner:
            return {"error": "the branch did not load"}
        try:
            return {"run": runner["executor"].run(Scenario.from_dict(request["scenario"]), runner["split"]).to_dict()}
        except ConfigRejected as exc:
            return {"rejected": str(exc)}
        except CheckoutMismatch as exc:
            return {"unfit": str(exc)}
        except Exception as exc:  # noqa: BLE001 - a fault of this run, as on the installed side
            unfit = unfit_for_installed(exc)  # e.g. the branch's Scheduler built on the installed configs
            if unfit is not None:
                return {"unfit": unfit}
            return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}

    serve(fd, ready, handle)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
