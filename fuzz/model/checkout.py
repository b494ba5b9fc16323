"""A vLLM source checkout as a candidate: its split alone, or (``branch:DIR``) its whole scheduling code.
Invariants: :func:`overlay_modules` lists exactly the modules branch mode serves, :func:`changed_files` compares exactly
those; a checkout's file is only read through :func:`inside` (a link out is a CheckoutError); code reaching for what
the installed vLLM lacks is a :class:`CheckoutMismatch` (exit 2), never a finding."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import InputError

OVERLAID_PACKAGES = ("vllm/v1/core",)
OVERLAID_FILES = ("vllm/v1/request.py", "vllm/v1/kv_cache_interface.py")
BRANCH_PREFIX = "branch:"
CHECKOUT_SCHEDULER_SPLIT = Path("vllm/v1/core/sched/scheduler.py")  # holds Scheduler._mamba_block_aligned_split


class CheckoutError(InputError):
    """A checkout whose file leads out of it (one line naming the file and where it leads)."""


def inside(root: Path, relative: str | Path) -> Path:
    """``root / relative`` if it does not lead out of ``root`` (by any link on the way), else a CheckoutError."""
    path = root / relative
    real_root, real = root.resolve(), path.resolve()
    if real != real_root and real_root not in real.parents:
        raise CheckoutError(f"{root}: {relative}: a link to {real}, outside the checkout")
    return path


@dataclass(frozen=True)
class ChangedFile:
    path: str  # relative to the checkout root, e.g. vllm/v1/core/single_type_kv_cache_manager.py
    line: int  # the first line (1-based) that differs from the installed file; 1 for a new file


def module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def overlay_files(root: Path) -> list[Path]:
    """The regular files branch mode brings, relative to ``root``; one leading out is a CheckoutError."""
    files = [Path(f) for f in OVERLAID_FILES if inside(root, f).is_file()]
    for package in OVERLAID_PACKAGES:
        found = sorted(p.relative_to(root) for p in inside(root, package).rglob("*.py"))
        files += [rel for rel in found if inside(root, rel).is_file()]
    return files


def overlay_modules(root: Path) -> dict[str, Path]:
    """Module name -> absolute source file, for every module whole-branch mode serves from ``root``."""
    return {module_name(rel): (root / rel).resolve() for rel in overlay_files(root)}


def installed_vllm_root() -> Path:
    """The directory holding the installed ``vllm`` package (its site-packages), found without importing it."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise LookupError("vLLM is not installed")
    return Path(next(iter(spec.submodule_search_locations))).parent


class CheckoutMismatch(InputError):
    """A checkout's code needs an attribute or a module the installed vLLM lacks (one line says which)."""


def _installed_file(path: str | None) -> bool:
    try:
        return path is not None and Path(path).resolve().is_relative_to(installed_vllm_root() / "vllm")
    except (LookupError, OSError):
        return False


def _foreign_vllm_file(path: str) -> bool:
    """A file of a vLLM source tree (``.../vllm/...py``) that is not the installed vLLM's."""
    return "vllm" in Path(path).parts[:-1] and not path.startswith("<") and not _installed_file(path)


TRANSPARENT_FILES: set[str] = set()  # gdnfuzz's files that stand between a checkout's code and vLLM's objects


def transparent_to_checkouts(path: str) -> None:
    """Frames of ``path`` (the sandbox's views) are skipped by :func:`unfit_for_installed`."""
    TRANSPARENT_FILES.add(path)


def owner_of(obj: object) -> tuple[str, str | None]:
    """What lacks the attribute, in words, and the file that defines it."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__, getattr(obj, "__file__", None)
    cls = obj if isinstance(obj, type) else type(obj)
    module = sys.modules.get(cls.__module__)
    return cls.__qualname__, getattr(module, "__file__", None)


def unfit_for_installed(exc: BaseException) -> str | None:
    """One line naming what a foreign vLLM tree's code lacks, for its AttributeError/ImportError ``exc``; else None."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<frozen") and f.filename not in TRANSPARENT_FILES]
    if not frames or not _foreign_vllm_file(frames[-1].filename):
        return None
    where = frames[-1]
    parts = Path(where.filename).parts
    at = f"{'/'.join(parts[len(parts) - 1 - parts[::-1].index('vllm'):])}:{where.lineno}"
    import vllm

    lacks = f"which the installed vLLM {vllm.__version__} lacks"
    if isinstance(exc, AttributeError) and exc.name is not None:
        # the object itself, or, read through a sandbox view (``fuzz.sandbox.views``), what its owner was
        obj = getattr(exc, "obj", None)
        owner, defined_in = getattr(exc, "installed_owner", None) or (owner_of(obj) if obj is not None else ("", None))
        if _installed_file(defined_in):
            return f"{at} needs {owner}.{exc.name}, {lacks}"
    if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] == "vllm":
        missing = str(exc).splitlines()[0] if "cannot import name" in str(exc) else f"module {exc.name}"
        return f"{at} needs {missing}, {lacks}"
    return None


def changed_files(root: Path) -> list[ChangedFile]:
    """The overlaid files where the checkout differs from the installed vLLM, with the first changed line."""
    installed = installed_vllm_root()
    changed: list[ChangedFile] = []
    for rel in overlay_files(root):
        ours = _lines(inside(root, rel))
        theirs_path = installed / rel
        if not theirs_path.is_file():
            changed.append(ChangedFile(str(rel), 1))
            continue
        theirs = _lines(theirs_path)
        if ours == theirs:
            continue
        matcher = difflib.SequenceMatcher(a=theirs, b=ours, autojunk=False)
        first = next(op for op in matcher.get_opcodes() if op[0] != "equal")
        changed.append(ChangedFile(str(rel), min(first[3], max(len(ours) - 1, 0)) + 1))
    return changed


def _lines(path: Path) -> list[str]:
    return _lines_text(path).splitlines()


def _lines_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def split_line(root: Path) -> int:
    """The line of ``def _mamba_block_aligned_split`` in a checkout's scheduler (1 when absent or unreadable)."""
    try:
        tree = ast.parse(_lines_text(inside(root, CHECKOUT_SCHEDULER_SPLIT)))
    except (SyntaxError, ValueError, RecursionError, MemoryError, OSError):
        return 1
    return next((node.lineno for node in ast.walk(tree)
                 if isinstance(node, ast.FunctionDef) and node.name == "_mamba_block_aligned_split"), 1)
