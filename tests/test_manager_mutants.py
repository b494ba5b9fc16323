"""The MambaManager mutants of ``bench/mutants/manager.py``: each materializes as a checkout one line away
from the installed vLLM, and is accepted as a whole-branch candidate."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from fuzz.model.checkout import changed_files, installed_vllm_root
from fuzz.model.policies import resolve_policy

ROOT = Path(__file__).resolve().parent.parent


def _manager() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_mutants_manager", ROOT / "bench" / "mutants" / "manager.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


manager = _manager()


def _diff(a: str, b: str) -> list[str]:
    """The changed lines (removed and added) between two texts."""
    return [line for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize("name", sorted(manager.MUTANTS))
def test_every_mutant_applies_to_the_installed_manager_as_one_line(name: str) -> None:
    installed = (installed_vllm_root() / manager.MANAGER_FILE).read_text()
    old, new = manager.MUTANTS[name]
    assert _diff(installed, manager.mutate(installed, name)) == [f"-{old}", f"+{new}"]


def test_a_mutant_checkout_differs_in_one_line_and_is_a_branch_policy(tmp_path: Path) -> None:
    name = (manager.DEEP + manager.SHALLOW + tuple(manager.MUTANTS))[0]
    root = manager.materialize(name, tmp_path / name)
    assert [c.path for c in changed_files(root)] == [manager.MANAGER_FILE]
    installed = (installed_vllm_root() / manager.MANAGER_FILE).read_text()
    assert len(_diff(installed, (root / manager.MANAGER_FILE).read_text())) == 2  # one line out, one in
    policy = resolve_policy(f"branch:{root}")
    assert policy.spec == f"branch:{root}" and policy.checkout == str(root.resolve())


def test_the_chosen_mutants_are_in_the_table() -> None:
    assert set(manager.DEEP) | set(manager.SHALLOW) <= set(manager.MUTANTS)
    assert not set(manager.DEEP) & set(manager.SHALLOW)


def test_a_line_not_found_exactly_once_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(manager.MUTANTS, "ambiguous", ("        else:", "        elif False:"))
    monkeypatch.setitem(manager.MUTANTS, "absent", ("    no such line", "    x = 1"))
    for name in ("ambiguous", "absent", "unknown"):
        with pytest.raises(manager.MutantError):
            manager.materialize(name, tmp_path / name)
        assert not (tmp_path / name).exists()
