"""Build vLLM's real Scheduler offline, for one set of engine knobs, with no model.

Only a ``VllmConfig`` over the tiny config and a hybrid ``KVCacheConfig`` (full attention + Mamba align) are made
here. Invariants: a VllmConfig is built by ``EngineArgs`` once per cache/spec knob set and cached (model parts
shared, ``_ModelParts``); scheduler knobs go on a copy checked by vLLM; each build is a fresh Scheduler with an
empty cache; a rejected knob set raises :class:`ConfigRejected` with vLLM's reason in one line."""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from fuzz.errors import ConfigRejected
from fuzz.model.knobs import EngineKnobs, engine_args, scheduler_settings
from fuzz.model.scenario import MAX_CONTEXT
from fuzz.report.harness_source import harness_literal
from workers.sim.block_pools import BlockPoolStock, recycled_block_pools

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

GDN_LAYER = "model.layers.0.linear_attn"
ATTENTION_LAYER = "model.layers.1.self_attn"


@dataclass(frozen=True)
class ConfigKey:
    """What the VllmConfig is built from: the engine args (``fuzz.model.knobs.engine_args``, canonical JSON) and
    whether a KV connector is attached. Scheduler knobs are set per run."""

    args: str
    kv_connector: bool = False

    @classmethod
    def of(cls, knobs: EngineKnobs, kv_connector: bool = False) -> ConfigKey:
        return cls(json.dumps(engine_args(knobs), sort_keys=True), kv_connector)

    @property
    def engine_args(self) -> dict[str, Any]:
        return json.loads(self.args)

    @property
    def model_key(self) -> tuple[str, bool]:
        """What the model-level configs depend on (the checkpoint is fixed): see ``_ModelParts``."""
        return json.dumps(self.engine_args["speculative_config"], sort_keys=True), self.kv_connector


def one_line_reason(exc: BaseException) -> str:
    """vLLM's reason for an exception in one line (pydantic's "Value error, ..." when present)."""
    text = " ".join(str(exc).split())
    if "Value error, " in text:
        text = text.split("Value error, ", 1)[1].split(" [type=", 1)[0]
    text = text or type(exc).__name__
    return text if len(text) <= 240 else text[:237] + "..."


@functools.cache
def _quiet_vllm() -> None:
    """Once per process (``Logger.setLevel`` clears every logger's cache)."""
    for name in ("vllm", "vllm.config", "vllm.engine"):
        logging.getLogger(name).setLevel(logging.ERROR)


class _ModelParts:
    """The model-level configs ``EngineArgs.create_engine_config`` builds (target ``ModelConfig``, speculative config
    and draft), the same for every cache knob: snapshotted as vLLM creates them; ``install`` gives each build fresh
    deep copies bound to its own objects, in exactly the state vLLM created them in."""

    def __init__(self) -> None:
        self.model: Any = None
        self.speculative: Any = None
        self._target_model, self._target_parallel = object(), object()  # placeholders

    def record(self, args: Any) -> None:
        """Let this build run as vLLM's own and snapshot what it creates."""
        create_model, create_speculative = args.create_model_config, args.create_speculative_config

        def model_config() -> Any:
            created = create_model()
            self.model = copy.deepcopy(created)
            return created

        def speculative_config(target_model_config: Any, target_parallel_config: Any) -> Any:
            created = create_speculative(target_model_config, target_parallel_config)
            self.speculative = copy.deepcopy(created, {id(target_model_config): self._target_model,
                                                       id(target_parallel_config): self._target_parallel})
            return created

        args.create_model_config, args.create_speculative_config = model_config, speculative_config

    def install(self, args: Any) -> None:
        """Make ``args`` create fresh copies of the snapshots instead of rebuilding them."""
        def model_config() -> Any:
            return copy.deepcopy(self.model)

        def speculative_config(target_model_config: Any, target_parallel_config: Any) -> Any:
            return copy.deepcopy(self.speculative, {id(self._target_model): target_model_config,
                                                    id(self._target_parallel): target_parallel_config})

        args.create_model_config, args.create_speculative_config = model_config, speculative_config


_MODEL_PARTS: dict[tuple[str, bool], _ModelParts] = {}


@functools.lru_cache(maxsize=1024)
def vllm_config_for(key: ConfigKey) -> Any:
    """The VllmConfig vLLM's EngineArgs produce for these knobs (cached; model-level configs per ``key.model_key``)."""
    args = _engine_args(key)
    parts = _MODEL_PARTS.get(key.model_key)
    if parts is None:
        parts = _ModelParts()
        parts.record(args)
    else:
        parts.install(args)
    try:
        config = args.create_engine_config()
    except Exception as exc:  # vLLM validates with several exception types
        raise ConfigRejected(f"vLLM rejects this engine config: {one_line_reason(exc)}") from None
    _MODEL_PARTS.setdefault(key.model_key, parts)
    return config


def _engine_args(key: ConfigKey) -> Any:
    """The ``EngineArgs`` the engine would be started with for these knobs, over the tiny checkpoint."""
    from vllm.engine.arg_utils import EngineArgs

    from workers.sim.connector import CONNECTOR_CLASS, CONNECTOR_MODULE
    from workers.tiny_model import tiny_config_dir

    _quiet_vllm()
    kv_transfer = (
        {"kv_connector": CONNECTOR_CLASS, "kv_connector_module_path": CONNECTOR_MODULE, "kv_role": "kv_both"}
        if key.kv_connector
        else None
    )
    # As in vLLM's engine after hybrid alignment: cache_config.block_size is B (the knob table's
    # mamba_block_size row says so), which is what the split reads as the Mamba block size.
    return EngineArgs(model=str(tiny_config_dir()), max_model_len=MAX_CONTEXT, kv_transfer_config=kv_transfer,
                      **harness_literal("ENGINE_ARGS"), **key.engine_args)  # as a bundle's test starts it


def with_scheduler_knobs(base: Any, knobs: EngineKnobs) -> Any:
    """A copy of ``base`` with the scenario's scheduler knobs, validated as vLLM validates them."""
    config = copy.copy(base)
    for name, value in scheduler_settings(knobs).items():
        setattr(config, name, value)
    config.max_num_scheduled_tokens = None  # the sim sets each step's budget itself
    try:
        config.verify_max_model_len(MAX_CONTEXT)
    except ValueError as exc:
        raise ConfigRejected(f"vLLM rejects this engine config: {one_line_reason(exc)}") from None
    return config


def kv_cache_config_for(vllm_config: Any, knobs: EngineKnobs, num_blocks: int) -> Any:
    """Hybrid KVCacheConfig: full attention + Mamba (align, B); a checkpoint block with a checkpoint alignment."""
    import torch
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        MambaSpec,
    )

    from workers.tiny_model import TINY_CONFIG as m
    from workers.tiny_model import gdn_state_shapes

    attention = FullAttentionSpec(
        block_size=knobs.block_size, num_kv_heads=m["num_key_value_heads"], head_size=m["head_dim"],
        dtype=torch.bfloat16,
    )
    mamba = MambaSpec(
        block_size=knobs.mamba_block_size,
        shapes=gdn_state_shapes(m),
        dtypes=(torch.bfloat16, torch.bfloat16),
        mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
        mamba_cache_mode="align",
        num_speculative_blocks=vllm_config.num_speculative_tokens,
        num_prefill_checkpoint_blocks=int(knobs.prefill_checkpoint_alignment is not None),
        prefill_checkpoint_alignment=knobs.prefill_checkpoint_alignment,
    )
    return KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec([ATTENTION_LAYER], attention),
            KVCacheGroupSpec([GDN_LAYER], mamba),
        ],
        prefix_cache_retention_interval=knobs.retention_interval,
    )


def default_num_blocks(knobs: EngineKnobs, total_tokens: int) -> int:
    """Enough blocks that nothing is evicted: every token of every request, twice over, rounded up to
    a multiple of ``NUM_BLOCKS_STEP`` (so runs share pool sizes and their pools can be recycled)."""
    needed = 2 * (total_tokens // knobs.block_size + 64 * (knobs.num_spec_tokens + 4)) + 256
    return -(-needed // NUM_BLOCKS_STEP) * NUM_BLOCKS_STEP


NUM_BLOCKS_STEP = 512


@functools.cache
def _pool_stock() -> BlockPoolStock:
    return BlockPoolStock()


def release_scheduler(scheduler: Any) -> None:
    """The run on ``scheduler`` is over: its block pool may serve a later build (if drained)."""
    _pool_stock().give_back(scheduler.kv_cache_manager.block_pool)


def scheduler_configs(knobs: EngineKnobs, num_blocks: int, kv_connector: bool = False) -> tuple[Any, Any, int]:
    """The ``VllmConfig``, hybrid ``KVCacheConfig`` (block sizes and alignment resolved as vLLM does) and block
    size a scheduler for these knobs is built with; the runner mirror reads the same."""
    from vllm.v1.core.kv_cache_utils import (
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )

    vllm_config = copy.copy(vllm_config_for(ConfigKey.of(knobs, kv_connector)))
    vllm_config.cache_config = copy.copy(vllm_config.cache_config)
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    vllm_config.scheduler_config = with_scheduler_knobs(vllm_config.scheduler_config, knobs)
    kv_cache_config = kv_cache_config_for(vllm_config, knobs, num_blocks)
    try:
        scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
        kv_cache_config.hash_block_size = hash_block_size
        kv_cache_config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
            kv_cache_config, vllm_config, scheduler_block_size, hash_block_size
        )
    except (ValueError, AssertionError, NotImplementedError) as exc:
        raise ConfigRejected(f"vLLM rejects this engine config: {one_line_reason(exc)}") from None
    return vllm_config, kv_cache_config, scheduler_block_size


def build_scheduler(knobs: EngineKnobs, num_blocks: int, kv_connector: bool = False) -> Any:
    """A fresh real Scheduler (empty cache), ``ScenarioConnector`` if asked; its pool may be a recycled, reset one."""
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config, kv_cache_config, scheduler_block_size = scheduler_configs(knobs, num_blocks, kv_connector)
    try:
        with recycled_block_pools(_pool_stock()):
            return Scheduler(
                vllm_config=vllm_config,
                kv_cache_config=kv_cache_config,
                structured_output_manager=StructuredOutputManager(vllm_config),
                block_size=scheduler_block_size,
                hash_block_size=kv_cache_config.hash_block_size,
            )
    except (ValueError, AssertionError, NotImplementedError) as exc:
        raise ConfigRejected(f"vLLM rejects this engine config: {one_line_reason(exc)}") from None
