"""vLLM's model-info cache, shared from the deciding process with a whole branch's process.

Building a ``VllmConfig`` makes vLLM inspect the model's classes (``ModelRegistry``: is it a text
generation model, hybrid, does it support MTP ...). Where the answer is not in its cache
(``$VLLM_CACHE_ROOT/modelinfos/<module>-<class>.json``, keyed by the hash of the model's source file),
vLLM starts a fresh interpreter that imports vLLM and the model to ask: 13 s a class on a loaded
2-core machine. A sandboxed child's ``VLLM_CACHE_ROOT`` is its own empty scratch directory
(``fuzz.sandbox.containment.runner_environment``), so every whole-branch process paid that for the
tiny model's target and draft classes, and again for every class it met first, in every run's start:
whole-branch fuzzing judged one input in 20 s.

The deciding process inspects the same classes for its own runner mirror (``workers.sim.scheduler``);
:func:`warm` makes it do so before the branch's process builds, and :func:`seed` copies the files the
deciding process's cache holds into the child's cache, which the child alone reads and writes.

Invariants: nothing here crosses into the deciding process (files flow one way, into the child's
scratch cache); a file is copied only where the child's cache lacks one of that name, never over it;
vLLM still checks each file's hash of the model source, so a stale file is recomputed as before; any
failure to copy only leaves the child to inspect as it did (slower, never different).
"""

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
    """Build (cached) this process's configs for ``knobs``, so the model classes they need are inspected
    and in :func:`cache_dir` before a child needs them; a configuration vLLM refuses is left for the child
    to refuse as it does."""
    from workers.sim.scheduler import scheduler_configs

    with contextlib.suppress(ConfigRejected):
        scheduler_configs(knobs, num_blocks, kv_connector)


def seed(source: str) -> None:
    """Copy the model-info files of ``source`` that this process's own cache lacks into it (the child side;
    ``VLLM_CACHE_ROOT`` as its environment sets it, read before vLLM is imported)."""
    root = os.environ.get("VLLM_CACHE_ROOT")
    if not source or not root:
        return
    target = Path(root) / SUBDIR
    with contextlib.suppress(OSError):
        target.mkdir(parents=True, exist_ok=True)
        for path in Path(source).glob("*.json"):
            if path.is_file() and not path.is_symlink() and not (target / path.name).exists():
                shutil.copyfile(path, target / path.name)
