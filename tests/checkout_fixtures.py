"""vLLM "checkouts" made from the installed vLLM's own files, for split-only and whole-branch tests.

``make_checkout(root)`` copies exactly what whole-branch mode brings (``fuzz.model.checkout``) from the
installed vLLM; ``edit`` then changes one file's text (an exact, unique substring replaced), so a test
plants one bug and nothing else. ``PRE_51113_SPLIT`` is the scheduler split before vLLM PR #51113,
written as a method of the checkout's ``Scheduler`` (``fuzz.model.policies._pre_51113_split`` itself).
"""

from __future__ import annotations

import ast
import inspect
import shutil
import subprocess
import textwrap
from pathlib import Path

from fuzz.model.checkout import OVERLAID_FILES, OVERLAID_PACKAGES, installed_vllm_root
from fuzz.model.policies import _pre_51113_split

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
MAMBA_MANAGER = "vllm/v1/core/single_type_kv_cache_manager.py"

# The same function the ``pre-51113`` policy runs, renamed and indented as a Scheduler method (the
# checkout's scheduler module imports ``Any``; the function's own import of the checkpoint helper
# resolves to that module).
PRE_51113_SPLIT = textwrap.indent(
    inspect.getsource(_pre_51113_split).replace("def _pre_51113_split(", "def _mamba_block_aligned_split(", 1), "    ")

# A MambaManager bug outside the split: a partial (hash-unit) cache hit claims one hash unit more
# than the cached slot holds, so the request resumes from a state short of its hit.
MAMBA_HIT_OFF_BY_ONE = ("                num_tokens = (fine_idx + 1) * hash_block_size\n",
                        "                num_tokens = (fine_idx + 2) * hash_block_size\n")


def make_checkout(root: Path) -> Path:
    installed = installed_vllm_root()
    for package in OVERLAID_PACKAGES:
        shutil.copytree(installed / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    for file in OVERLAID_FILES:
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(installed / file, root / file)
    return root


def committed_checkout(root: Path, scheduler: Path, message: str) -> list[str]:
    """:func:`make_checkout` as a git repository: the installed files, then ``scheduler`` (a ``scheduler.py``)
    committed over them as ``message``. Returns the git command that works in it."""
    git = ["git", "-C", str(make_checkout(root)), "-c", "user.name=dev", "-c", "user.email=dev@example.invalid"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "installed"]):
        subprocess.run([*git, *args], check=True)
    shutil.copyfile(scheduler, root / SCHEDULER)
    subprocess.run([*git, "commit", "-qam", message], check=True)
    return git


def edit(root: Path, file: str, old: str, new: str) -> None:
    path = root / file
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not unique in {file}"
    path.write_text(text.replace(old, new))


def replace_split(root: Path, method_source: str = PRE_51113_SPLIT) -> None:
    """Replace the checkout's Scheduler._mamba_block_aligned_split with ``method_source``."""
    path = root / SCHEDULER
    lines = path.read_text().splitlines(keepends=True)
    tree = ast.parse("".join(lines))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_mamba_block_aligned_split")
    first = min([method.lineno, *(d.lineno for d in method.decorator_list)]) - 1
    path.write_text("".join(lines[:first]) + method_source + "".join(lines[method.end_lineno:]))
