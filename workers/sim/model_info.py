"""vLLM's model-info cache, shared from the deciding process with a whole branch's process.

:func:`warm` has the deciding process inspect the model classes first; :func:`seed` copies its cache files into
the child's scratch cache. Invariants: files flow one way, into the child; a file is copied only where the
child's cache lacks that name; vLLM still checks each file's source hash; a failed copy only leaves the child to
inspect as before (slower, never different)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from fuzz.errors import ConfigRejected
from fuzz.model.knobs import EngineKnobs

SUBDIR = "modelinfos"


def cache_dir() -> Path:
    """This process's vLLM model-info cache (imports vLLM's ``envs``: call where vLLM is imported anyway)."""
    from vllm import envs

    return Path(envs.VLLM_CACHE_ROOT) / SUBDIR


def warm(knobs: EngineKnobs, num_blocks: int, kv_connector: bool) -> None:
    """Build (cached) this process's configs for ``knobs`` so the model classes they need are in :func:`cache_dir`
    before a child needs them; a configuration vLLM refuses is left for the child to refuse."""
    from workers.sim.scheduler import scheduler_configs

    with contextlib.suppress(ConfigRejected):
        scheduler_configs(knobs, num_blocks, kv_connector)


def seed(source: str) -> None:
    """Copy ``source``'s model-info files this process's cache lacks into it (the child, before vLLM's import)."""
    root = os.environ.get("VLLM_CACHE_ROOT")
    if not source or not root:
        return
    target = Path(root) / SUBDIR
    with contextlib.suppress(OSError):
        target.mkdir(parents=True, exist_ok=True)
        for path in Path(source).glob("*.json"):
            if path.is_file() and not path.is_symlink() and not (target / path.name).exists():
                shutil.copyfile(path, target / path.name)
