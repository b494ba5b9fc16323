"""A finding's configuration and code in vLLM's terms: ``vllm serve`` flags, model family, version, locations.

Invariant: every flag comes from the knob table (``fuzz.model.knobs.engine_args``), knobs without one in words; every
``file:line`` is read from the installed vLLM (else its function's first line)."""

from __future__ import annotations

import inspect
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.model.knobs import EngineKnobs, engine_args

FIXED_FLAGS = ("--enable-prefix-caching", "--mamba-cache-mode", "align")


@dataclass(frozen=True)
class Family:
    """The Mamba layer family ``prefill_checkpoint_alignment`` stands for: its ``MambaSpec`` and a model to serve."""

    name: str
    example: str
    spec: str


GDN = Family("Gated DeltaNet", "Qwen/Qwen3-Next-80B-A3B-Instruct",
             "Gated DeltaNet layers (their MambaSpec declares no internal prefill checkpoint)")
MAMBA2 = Family("Mamba2", "nvidia/NVIDIA-Nemotron-Nano-9B-v2",
                "Mamba2 layers (MambaMixer2's MambaSpec declares one internal prefill checkpoint block, "
                "alignment 1)")


def family(knobs: EngineKnobs) -> Family:
    """The layer family of ``knobs``: GDN without a checkpoint spec, Mamba2 at alignment 1, KDA otherwise."""
    alignment = knobs.prefill_checkpoint_alignment
    if alignment is None:
        return GDN
    if alignment == 1:
        return MAMBA2
    return Family("KDA", "moonshotai/Kimi-K3",
                  f"KDA layers (with the FlashKDA backend their MambaSpec declares one internal prefill "
                  f"checkpoint block; here alignment {alignment})")


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


def serve_command(knobs: EngineKnobs, model: str | None = None) -> str:
    """``vllm serve`` for the configuration on ``model`` (default: a placeholder naming a model of its family)."""
    f = family(knobs)
    return shlex.join(["vllm", "serve", model or f"<a {f.name} hybrid, e.g. {f.example}>", *serve_flags(knobs)])


def model_words(knobs: EngineKnobs) -> list[str]:
    """What the knobs without a flag ask of the model and the run, in words."""
    words = [f"a hybrid model whose full-attention KV blocks hold {knobs.block_size} tokens "
             f"(the Mamba block B is {knobs.mamba_block_size})", family(knobs).spec]
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


def relative_to_vllm(path: str) -> str:
    """``vllm/...`` of a file of the installed vLLM (the path as given for any other file)."""
    parts = Path(path).parts
    return Path(*parts[len(parts) - 1 - parts[::-1].index("vllm"):]).as_posix() if "vllm" in parts else path


def _location(obj: Any) -> str:
    """``vllm/...py:LINE`` of a function or class of the installed vLLM."""
    return f"{relative_to_vllm(inspect.getsourcefile(obj) or '?')}:{inspect.getsourcelines(obj)[1]}"


def vllm_locations() -> dict[str, str]:
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    return {
        "Scheduler._mamba_block_aligned_split": _location(Scheduler._mamba_block_aligned_split),
        "KVCacheManager.allocate_slots": _location(KVCacheManager.allocate_slots),
        "MambaManager": _location(MambaManager),
    }


# The line of vLLM's split that makes each of its stops (``SplitDisagreement.decider``), found by its text.
DECIDER_LINES = {
    "next-boundary": "if start % block_size != 0 and not use_internal_checkpoint",
    "lcp": "last_cache_position = get_mamba_prefill_checkpoint_position(",
    "aligned-end": "end = aligned_end",
    "sub-block": "if aligned_end > start or block_size <= max_prefill_tokens",
    "prompt-checkpoint": "if last_cache_position < tail_boundary < request.num_prompt_tokens",
    "junction": "junction_stop if start < junction < end else 0",
    "defer": "return max(end - start, 0)",
    "prefill-end": "prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)",
    "internal-checkpoint": "use_internal_checkpoint = (",
}


def split_line(decider: str) -> tuple[str, str]:
    """``(file:line, text)`` of the installed split's line making stop ``decider`` (else its ``def`` line)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    split = Scheduler.__dict__["_mamba_block_aligned_split"]
    lines, first = inspect.getsourcelines(split)
    where = relative_to_vllm(inspect.getsourcefile(split) or "?")
    marker = DECIDER_LINES.get(decider)
    for offset, text in enumerate(lines):
        if marker is not None and marker in re.sub(r"\s+", " ", text):
            return f"{where}:{first + offset}", text.strip()
    return f"{where}:{first}", lines[0].strip()


# The line of a KV-cache manager's ``get_num_blocks_to_allocate`` that bounds its estimate, by manager, found
# by its text (MambaManager's align-mode cap: one running block, plus the partial-hit and checkpoint blocks).
ESTIMATE_LINES = {
    "MambaManager": "physical_block_cap = ",
}


def estimate_line(allocating_line: int) -> tuple[str, str, str] | None:
    """``(Manager.get_num_blocks_to_allocate, file:line, text)`` of the estimate of the manager whose
    ``allocate_new_blocks`` holds line ``allocating_line`` (else its ``def`` line); None where none holds it."""
    import vllm.v1.core.single_type_kv_cache_manager as managers

    for cls in vars(managers).values():
        allocate = cls.__dict__.get("allocate_new_blocks") if isinstance(cls, type) else None
        if allocate is None or getattr(allocate, "__module__", None) != managers.__name__:
            continue
        lines, first = inspect.getsourcelines(allocate)
        if not first <= allocating_line < first + len(lines):
            continue
        owner = next((c for c in cls.__mro__ if "get_num_blocks_to_allocate" in c.__dict__), None)
        if owner is None:
            return None
        estimate = owner.__dict__["get_num_blocks_to_allocate"]
        lines, first = inspect.getsourcelines(estimate)
        where = relative_to_vllm(inspect.getsourcefile(estimate) or "?")
        marker = ESTIMATE_LINES.get(owner.__name__)
        for offset, text in enumerate(lines):
            if marker is not None and marker in text:
                return f"{owner.__name__}.get_num_blocks_to_allocate", f"{where}:{first + offset}", text.strip()
        return f"{owner.__name__}.get_num_blocks_to_allocate", f"{where}:{first}", lines[0].strip()
    return None
