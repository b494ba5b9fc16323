"""vLLM "checkouts" made from the installed vLLM's own files, for split-only and whole-branch tests.

``make_checkout(root)`` copies exactly what whole-branch mode brings (``fuzz.model.checkout``) from the
installed vLLM; ``edit`` then changes one file's text (an exact, unique substring replaced), so a test
plants one bug and nothing else. ``PRE_51113_SPLIT`` is the scheduler split before vLLM PR #51113,
written as a method of the checkout's ``Scheduler`` (the logic of ``fuzz.model.policies._pre_51113_split``).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from fuzz.model.checkout import OVERLAID_FILES, OVERLAID_PACKAGES, installed_vllm_root

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
MAMBA_MANAGER = "vllm/v1/core/single_type_kv_cache_manager.py"

PRE_51113_SPLIT = '''    def _mamba_block_aligned_split(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_local_computed_tokens: int = 0,
        num_external_computed_tokens: int = 0,
    ) -> int:
        start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
        if start >= max(request.num_prompt_tokens, request.num_tokens - 1):
            return num_new_tokens
        block = self.cache_config.block_size
        last_cache_position = get_mamba_prefill_checkpoint_position(
            request.num_tokens, block, self.use_eagle_block_drop
        )
        end = start + num_new_tokens
        if end < last_cache_position and end // block * block > start:
            end = end // block * block
        next_boundary = (start // block + 1) * block
        if start % block and next_boundary <= last_cache_position and next_boundary < end:
            end = next_boundary
        if start < last_cache_position < end:
            end = last_cache_position
        return end - start
'''

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
