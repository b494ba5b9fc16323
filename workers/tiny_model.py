"""The tiny hybrid GDN model the engine tier runs: a Qwen3-Next config and seeded random weights, none from a hub.

:func:`tiny_config_dir` writes ``config.json``; :func:`tiny_model_dir` adds seeded ``model.safetensors``; both live
under :func:`cache_root` in a folder named by the digest of config and weight recipe. Invariant: the same
``(config, seed)`` always yields byte-identical tensors. The shape (DOMAIN.md section 6) makes outputs depend on
the recurrent state far beyond bf16 noise, and lets align mode run every B from 32."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fuzz.model.scenario import VOCAB_SIZE
from fuzz.report.harness_source import harness_literal

WEIGHT_SEED = 20261202
WEIGHT_RECIPE = ("v2: normal(0, initializer_range) matrices, zero RMSNorm offsets, A_log=log U(0.005, 0.05), "
                 "dt_bias=-6, in_proj_ba x0.1, GDN out_proj x2")
# Long GDN memory: softplus(a - 6) ~ 0.0025 makes the decay exp(-A * 0.0025) ~ 1 per token, and a small
# in_proj_ba keeps the delta-rule write strength beta near 0.5, so the state keeps thousands of tokens.
GDN_SCALES = {"in_proj_ba.weight": 0.1, "out_proj.weight": 2.0}

TINY_CONFIG: dict[str, Any] = harness_literal("MODEL_CONFIG")  # the replay harness's model, written there once
if TINY_CONFIG["vocab_size"] != VOCAB_SIZE:
    raise AssertionError(f"the harness's model has {TINY_CONFIG['vocab_size']} tokens, scenarios {VOCAB_SIZE}")


def cache_root() -> Path:
    """Where generated models live: ``$GDNFUZZ_CACHE`` or ``~/.cache/gdnfuzz``."""
    return Path(os.environ.get("GDNFUZZ_CACHE") or Path.home() / ".cache" / "gdnfuzz")


def _digest(config: dict[str, Any], with_weights: bool) -> str:
    blob = json.dumps([config, WEIGHT_SEED if with_weights else None, WEIGHT_RECIPE if with_weights else None],
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _materialise(name: str, config: dict[str, Any], with_weights: bool) -> Path:
    """Create ``<cache>/<name>-<digest>`` once (atomically, via a rename) and return it."""
    target = cache_root() / f"{name}-{_digest(config, with_weights)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        (staging / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
        if with_weights:
            from safetensors.torch import save_file

            save_file(random_weights(config, WEIGHT_SEED), str(staging / "model.safetensors"))
        with contextlib.suppress(OSError):  # another process won the race: its copy is identical
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def tiny_config_dir() -> Path:
    """A directory with only the tiny model's ``config.json`` (MTP-capable): enough for engine configs, a Scheduler."""
    return _materialise("tiny-qwen3-next-config", TINY_CONFIG, with_weights=False)


def tiny_model_dir() -> Path:
    """A directory with ``config.json`` and seeded random weights (generated on first use, ~20 MB)."""
    return _materialise("tiny-qwen3-next", TINY_CONFIG, with_weights=True)


# ---------------------------------------------------------------- weights


def gdn_state_shapes(config: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """A GDN layer's per-slot state: conv ``(kernel - 1, conv_dim)`` (queries and keys of every key head, values of
    every value head) and SSM ``(value heads, key dim, value dim)``."""
    nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
    dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
    return (config["linear_conv_kernel_dim"] - 1, 2 * nk * dk + nv * dv), (nv, dk, dv)


def _layer_shapes(config: dict[str, Any], prefix: str, kind: str, dense_mlp: bool) -> dict[str, tuple[int, ...]]:
    """HF checkpoint names and shapes of one decoder layer (the layout vLLM's Qwen3-Next loader reads)."""
    h = config["hidden_size"]
    shapes: dict[str, tuple[int, ...]] = {
        f"{prefix}.input_layernorm.weight": (h,),
        f"{prefix}.post_attention_layernorm.weight": (h,),
    }
    if kind == "linear_attention":
        nk, nv = config["linear_num_key_heads"], config["linear_num_value_heads"]
        dk, dv = config["linear_key_head_dim"], config["linear_value_head_dim"]
        a = f"{prefix}.linear_attn"
        shapes |= {
            f"{a}.in_proj_qkvz.weight": (2 * nk * dk + 2 * nv * dv, h),
            f"{a}.in_proj_ba.weight": (2 * nv, h),
            f"{a}.conv1d.weight": (gdn_state_shapes(config)[0][1], 1, config["linear_conv_kernel_dim"]),
            f"{a}.dt_bias": (nv,),
            f"{a}.A_log": (nv,),
            f"{a}.norm.weight": (dv,),
            f"{a}.out_proj.weight": (h, nv * dv),
        }
    else:
        nh, nkv, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
        a = f"{prefix}.self_attn"
        shapes |= {
            f"{a}.q_proj.weight": (2 * nh * hd, h),  # query and its output gate
            f"{a}.k_proj.weight": (nkv * hd, h),
            f"{a}.v_proj.weight": (nkv * hd, h),
            f"{a}.o_proj.weight": (h, nh * hd),
            f"{a}.q_norm.weight": (hd,),
            f"{a}.k_norm.weight": (hd,),
        }
    m = f"{prefix}.mlp"
    if dense_mlp:
        return shapes | _mlp_shapes(m, h, config["intermediate_size"])
    shapes[f"{m}.gate.weight"] = (config["num_experts"], h)
    shapes[f"{m}.shared_expert_gate.weight"] = (1, h)
    shapes |= _mlp_shapes(f"{m}.shared_expert", h, config["shared_expert_intermediate_size"])
    for e in range(config["num_experts"]):
        shapes |= _mlp_shapes(f"{m}.experts.{e}", h, config["moe_intermediate_size"])
    return shapes


def _mlp_shapes(prefix: str, hidden: int, inner: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.gate_proj.weight": (inner, hidden),
        f"{prefix}.up_proj.weight": (inner, hidden),
        f"{prefix}.down_proj.weight": (hidden, inner),
    }


def checkpoint_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor of the checkpoint, main model and MTP head, in a fixed order."""
    h, v = config["hidden_size"], config["vocab_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for i, kind in enumerate(config["layer_types"]):
        shapes |= _layer_shapes(config, f"model.layers.{i}", kind, i in config["mlp_only_layers"])
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (v, h)
    for j in range(config["num_nextn_predict_layers"]):
        shapes |= _layer_shapes(config, f"mtp.layers.{j}", "full_attention", dense_mlp=False)
    if config["num_nextn_predict_layers"]:
        shapes |= {
            "mtp.fc.weight": (h, 2 * h),
            "mtp.norm.weight": (h,),
            "mtp.pre_fc_norm_hidden.weight": (h,),
            "mtp.pre_fc_norm_embedding.weight": (h,),
        }
    return shapes


def random_weights(config: dict[str, Any], seed: int) -> dict[str, Any]:
    """Seeded bf16 tensors for :func:`checkpoint_shapes`, each from its own name-derived stream (norms: 0 for the
    ``1 + w`` RMSNorms, 1 for the gated GDN norm; a small ``A_log`` for a slow state decay)."""
    import torch

    std = config["initializer_range"]
    out: dict[str, Any] = {}
    for name, shape in checkpoint_shapes(config).items():
        gen = torch.Generator().manual_seed(seed ^ int.from_bytes(hashlib.sha256(name.encode()).digest()[:7], "big"))
        if name.endswith("linear_attn.norm.weight"):
            t = torch.ones(shape)
        elif name.endswith("norm.weight"):
            t = torch.zeros(shape)
        elif name.endswith("A_log"):
            t = torch.empty(shape).uniform_(0.005, 0.05, generator=gen).log_()
        elif name.endswith("dt_bias"):
            t = torch.full(shape, -6.0)
        else:
            t = torch.empty(shape).normal_(0.0, std, generator=gen)
            if ".linear_attn." in name:
                t *= GDN_SCALES.get(name.rsplit(".linear_attn.", 1)[1], 1.0)
        out[name] = t.to(torch.bfloat16).contiguous()
    return out
