"""The tiny hybrid GDN model the engine tier runs: a Qwen3-Next config and seeded random weights.

Nothing comes from a hub. :func:`tiny_config_dir` writes only ``config.json`` (what vLLM needs to
build an engine config or an offline Scheduler); :func:`tiny_model_dir` also writes
``model.safetensors`` with weights drawn from a seeded generator. Both directories live under the
cache root (``$GDNFUZZ_CACHE`` or ``~/.cache/gdnfuzz``) in a folder named after the digest of the
config and the weight recipe, so a change to either gets a fresh folder and an unchanged one is
reused. Invariant: the same ``(config, seed)`` always yields byte-identical tensors.

Shape of the model (DOMAIN.md section 6 lists the choices forced on the CPU build), and why:

- layer 0 Gated DeltaNet (linear attention) with a 4-expert MoE, layer 1 full attention with a
  dense MLP (``mlp_only_layers=[1]``), one MTP layer (``num_nextn_predict_layers=1``; its weights
  are generated too). vLLM names the MTP layer ``mtp.layers.0``, so it reads as layer index 0 and
  must be a MoE layer: ``Qwen3NextMTP.set_moe_parameters`` refuses a draft with none.
- bf16; linear key/value head dim 128 (the CPU GDN kernel rejects smaller).
- attention with 8 query and 8 KV heads of dim 256, wider than the rest of the model needs, so
  that its page per token (8 KB) lets a 32-token attention page hold the GDN state page. In align
  mode vLLM raises the block size until it does; a narrower attention made the engine refuse every
  B below 384, the sizes minimized reproducers shrink to. Reaching the same limit with one GDN
  value head instead of two moved correct runs' logprobs by up to 0.52 between chunkings.
- every token routed to all 4 experts (``num_experts_per_tok`` 4). With top-2 routing a near-tie
  in the router flipped the expert choice between two chunkings of one prompt and moved a correct
  run's logprobs by 0.75 (``gdnfuzz gen --seed 5``, scenario 21); with all experts active the
  routing weights are continuous in the inputs.
- weights scaled (``initializer_range`` 0.2) and a slow GDN decay (``dt_bias`` -6, small
  ``in_proj_ba``), so the next-token distribution depends strongly on the recurrent state: a state
  a few tokens off moves logprobs far beyond bf16 noise (bench/engine_throughput.py measures both).
"""

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

WEIGHT_SEED = 20261202
WEIGHT_RECIPE = ("v2: normal(0, initializer_range) matrices, zero RMSNorm offsets, A_log=log U(0.005, 0.05), "
                 "dt_bias=-6, in_proj_ba x0.1, GDN out_proj x2")
# Long GDN memory: softplus(a - 6) ~ 0.0025 makes the decay exp(-A * 0.0025) ~ 1 per token, and a small
# in_proj_ba keeps the delta-rule write strength beta near 0.5, so the state keeps thousands of tokens.
GDN_SCALES = {"in_proj_ba.weight": 0.1, "out_proj.weight": 2.0}

TINY_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "full_attention"],
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000.0,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [1],
    "norm_topk_prob": True,
    "num_nextn_predict_layers": 1,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.2,
    "max_position_embeddings": 16384,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


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
    """A directory holding only the tiny model's ``config.json`` (MTP-capable); no weights.

    Enough for ``EngineArgs(model=str(tiny_config_dir()), skip_tokenizer_init=True,
    load_format="dummy", ...).create_engine_config()`` and an offline Scheduler.
    """
    return _materialise("tiny-qwen3-next-config", TINY_CONFIG, with_weights=False)


def tiny_model_dir() -> Path:
    """A directory with ``config.json`` and seeded random weights (generated on first use, ~20 MB)."""
    return _materialise("tiny-qwen3-next", TINY_CONFIG, with_weights=True)


# ---------------------------------------------------------------- weights


def gdn_state_shapes(config: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int, int]]:
    """A GDN layer's per-slot state: conv ``(kernel - 1, conv_dim)`` and SSM ``(value heads, key dim, value dim)``.

    ``conv_dim`` is the channels the short convolution runs over: queries and keys of every key head
    and values of every value head.
    """
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
    """Seeded bf16 tensors for :func:`checkpoint_shapes` (each drawn from its own name-derived stream).

    Norm weights: 0 for the ``1 + w`` RMSNorms, 1 for the gated GDN norm. ``A_log`` is small so
    the delta-rule state decays slowly and the output keeps a long memory of the state.
    """
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
