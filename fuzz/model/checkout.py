"""A vLLM source checkout as a candidate: which of its files whole-branch mode brings, and what changed.

Two modes (``gdnfuzz policies`` and the README say the same):

- **split** (a bare checkout directory as the policy): only the checkout's
  ``Scheduler._mamba_block_aligned_split`` is taken, compiled against the installed scheduler; every
  other line of the branch is ignored.
- **branch** (``branch:DIR``): the checkout's pure-Python scheduling code, :data:`OVERLAID_PACKAGES`
  and :data:`OVERLAID_FILES`, is imported in place of the installed modules of the same names, in a
  candidate process of its own (``workers.sim.branch``), so the branch's whole scheduler, KV-cache
  manager, coordinator, block pool and request run against the installed ones. Everything else
  (the model runner, configs, the engine) stays the installed vLLM's.

Invariants: :func:`overlay_modules` lists exactly the modules whole-branch mode serves from the
checkout, and :func:`changed_files` compares exactly those files against the installed vLLM; a file of
a checkout is only ever read through :func:`inside`, so a link that leads out of the checkout (an
absolute symlink, ``../..``, a linked directory) is a :class:`CheckoutError` naming it, never a file
read from elsewhere (as the base reader, ``fuzz.model.revision``, refuses to write one).

A checkout written for another vLLM can reach, when it runs, for an attribute or a module the installed
vLLM lacks (0.33.0's ``vllm/v1/core`` over 0.32.0 asks ``SpeculativeConfig.needs_eagle_block_drop``).
That is not the candidate's bug: :func:`unfit_for_installed` recognises it (an ``AttributeError`` on an
object of the installed vLLM, or an ``ImportError`` of a ``vllm`` module, raised by code of a vLLM source
tree other than the installed one) and the sim tier raises :class:`CheckoutMismatch` with it, one line,
exit 2 (``bisect`` skips such a revision, ``ci`` reports a side it cannot load), never a finding.
"""

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
    """``root / relative``, once it is known not to lead out of ``root`` (a link, or a linked directory on
    the way, to a place outside): else a :class:`CheckoutError` naming the file."""
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
    """The checkout's files that whole-branch mode brings, relative to ``root`` (regular files only); one that
    leads out of the checkout is a :class:`CheckoutError`."""
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
    """Frames of ``path`` (the sandbox's views of vLLM's objects) are not where an exception was raised for
    :func:`unfit_for_installed`: the code that read through them was."""
    TRANSPARENT_FILES.add(path)


def owner_of(obj: object) -> tuple[str, str | None]:
    """What lacks the attribute, in words, and the file that defines it."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__, getattr(obj, "__file__", None)
    cls = obj if isinstance(obj, type) else type(obj)
    module = sys.modules.get(cls.__module__)
    return cls.__qualname__, getattr(module, "__file__", None)


def unfit_for_installed(exc: BaseException) -> str | None:
    """One line when ``exc`` is a checkout's code reaching for what the installed vLLM lacks (see the module
    docstring), naming the file and line, and the attribute or module; None for anything else."""
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
    """A source file's lines for comparing (bytes that are not UTF-8 compare as replacement characters)."""
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
