"""The house rules, checked on the source: which package may import which, and no import loops.

Every ``import`` and ``from ... import`` of the project's own modules is read with ``ast`` (those
inside functions too, since a lazy import is still a dependency), then:
- nothing in ``fuzz/`` below the CLI imports ``workers/``: the tier registry names executors by
  module path (``fuzz.tiers.REGISTRY``), and only a subcommand (``fuzz.cli.*``) may import a worker
  package directly (``gdnfuzz campaign`` starts the Ray driver);
- the packages stand on floors and import only downward (:data:`FLOORS`): a package never imports one
  on its own floor or above it;
- the module graph has no cycle, lazy imports included;
- the pytest plugin's entry module (``gdnfuzz_pytest.py``, loaded into any project's pytest process, where
  ``fuzz`` and ``workers`` may be the project's own) imports only the standard library and pytest.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fuzz", "workers")
# From the ground up: each package imports only packages on lower floors.
FLOORS = (
    ("fuzz.errors", "fuzz"),
    ("fuzz.model",),
    ("fuzz.tiers",),
    ("fuzz.sandbox",),
    ("fuzz.oracle",),
    ("fuzz.reduce", "fuzz.store"),
    ("fuzz.report",),
    ("fuzz.search",),
    ("fuzz.triage",),
    ("workers",),
    ("fuzz.cli", "fuzz.pytest_server"),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` refers to (``a.b.c`` may be module ``a.b`` and attribute ``c``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != name and not name.startswith(resolved + "."):
                    deps.add(resolved)
        graph[name] = deps
    return graph


def test_fuzz_reaches_workers_only_through_the_registry_and_the_cli():
    offenders = sorted(f"{m} -> {d}" for m, deps in import_graph().items()
                       if m.startswith("fuzz") and not m.startswith("fuzz.cli")
                       for d in deps if d.startswith("workers"))
    assert offenders == []


def _package(module: str) -> str:
    """The longest package of :data:`FLOORS` that holds ``module``."""
    return max((p for floor in FLOORS for p in floor if module == p or module.startswith(p + ".")), key=len)


def test_packages_import_only_downward():
    floor = {p: i for i, packages in enumerate(FLOORS) for p in packages}
    upward = sorted(f"{m} -> {d}" for m, deps in import_graph().items() for d in deps
                    if _package(m) != _package(d) and floor[_package(d)] >= floor[_package(m)])
    assert upward == []


def test_no_module_imports_another_in_a_loop():
    graph = import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_registry_names_importable_executors():
    from fuzz.tiers import REGISTRY

    modules = _modules()
    for tier, entry in REGISTRY.items():
        module, _, attr = entry.executor.partition(":")
        assert module in modules, tier
        assert f"class {attr}(" in modules[module].read_text(), tier


def test_the_pytest_plugin_imports_only_the_standard_library_and_pytest():
    tree = ast.parse((ROOT / "gdnfuzz_pytest.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert sorted(m for m in imported if m.split(".")[0] not in {*sys.stdlib_module_names, "pytest"}) == []
