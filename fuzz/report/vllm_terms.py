"""A finding's configuration and code in vLLM's own terms: the ``vllm serve`` flags that produce it, the
model it needs, the installed vLLM's version, and where the functions involved live.

Every flag comes from the knob table (``fuzz.model.knobs.engine_args``): a knob's engine, scheduler and pool
arguments are ``EngineArgs`` fields, and ``vllm serve`` takes each as ``--<name with dashes>``. Knobs with no
flag (the attention block, a Mamba2/KDA checkpoint spec, per-step budgets) are said in words.

Invariant: nothing here changes what a finding is; it only says it in the words a vLLM maintainer uses.
"""

from __future__ import annotations

import inspect
import json
import shlex
from pathlib import Path
from typing import Any

from fuzz.model.knobs import EngineKnobs, engine_args

FIXED_FLAGS = ("--enable-prefix-caching", "--mamba-cache-mode", "align")


def _flag(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, bool):
        return [f"--{name.replace('_', '-')}"] if value else []
    text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
    return [f"--{name.replace('_', '-')}", text]


def serve_flags(knobs: EngineKnobs) -> list[str]:
    """The ``vllm serve`` flags of a configuration: align-mode prefix caching and every knob's argument."""
    flags = list(FIXED_FLAGS)
    for name, value in engine_args(knobs, ("engine", "scheduler", "pool")).items():
        flags += _flag(name, value)
    return flags


def serve_command(knobs: EngineKnobs, model: str = "<a hybrid GDN model, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct>") -> str:
    return shlex.join(["vllm", "serve", model, *serve_flags(knobs)])


def model_words(knobs: EngineKnobs) -> list[str]:
    """What the knobs without a flag ask of the model and the run, in words."""
    words = [f"a hybrid model whose full-attention KV blocks hold {knobs.block_size} tokens "
             f"(the Mamba block B is {knobs.mamba_block_size})"]
    if knobs.prefill_checkpoint_alignment is None:
        words.append("Gated DeltaNet layers (their MambaSpec declares no internal prefill checkpoint)")
    else:
        words.append(f"Mamba2/KDA-style layers whose MambaSpec declares one internal prefill checkpoint block with "
                     f"alignment {knobs.prefill_checkpoint_alignment} (Mamba2 declares 1)")
    if knobs.step_budgets:
        words.append(f"per-step token budgets {list(knobs.step_budgets)} for the first steps, then "
                     f"{knobs.max_num_batched_tokens} (concurrent requests sharing the budget give the same "
                     "chunks; vLLM's own test for PR #51113 hand-picks budgets the same way)")
    return words


def vllm_release() -> str:
    """The installed vLLM's version, and its commit where the build records one."""
    import vllm
    from vllm import _version

    commit = getattr(_version, "__commit_id__", None) or getattr(_version, "commit_id", None)
    return f"{vllm.__version__} ({f'commit {commit}' if commit else 'commit unknown: a release wheel'})"


def _location(obj: Any) -> str:
    """``vllm/...py:LINE`` of a function or class of the installed vLLM."""
    path = Path(inspect.getsourcefile(obj) or "?")
    parts = path.parts
    relative = Path(*parts[parts.index("vllm"):]) if "vllm" in parts else path
    return f"{relative.as_posix()}:{inspect.getsourcelines(obj)[1]}"


def vllm_locations() -> dict[str, str]:
    """Where the functions a finding involves live in the installed vLLM."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    return {
        "Scheduler._mamba_block_aligned_split": _location(Scheduler._mamba_block_aligned_split),
        "KVCacheManager.allocate_slots": _location(KVCacheManager.allocate_slots),
        "MambaManager": _location(MambaManager),
    }
