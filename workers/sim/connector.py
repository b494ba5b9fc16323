"""The sim tier's KV connector: a scheduler-role connector through vLLM's own interface.

``ScenarioConnector`` is loaded by ``KVConnectorFactory`` as a user's is, so every connector branch of
``Scheduler.schedule`` runs for real. ``hold(request_id, tokens)`` offers that many prompt tokens, rounded down to
the attention block and capped at ``num_prompt_tokens - 1``; loads are synchronous. Invariant: every request
allocated with external tokens is in ``build_connector_meta`` with its block ids; the runner mirror is the worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)

CONNECTOR_MODULE = __name__
CONNECTOR_CLASS = "ScenarioConnector"


@dataclass(frozen=True)
class ExternalLoad:
    """One synchronous load of ``num_external_tokens`` tokens into ``block_ids`` (per group); it ends
    at the request's ``num_computed_tokens`` as the step's ``SchedulerOutput`` reports it."""

    request_id: str
    num_external_tokens: int
    block_ids: tuple[tuple[int, ...], ...]


@dataclass
class ScenarioConnectorMetadata(KVConnectorMetadata):
    loads: list[ExternalLoad] = field(default_factory=list)


class ScenarioConnector(KVConnectorBase_V1, SupportsHMA):
    """Scheduler role only; offers what ``hold`` registered."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any):
        super().__init__(vllm_config, role, kv_cache_config)
        if role != KVConnectorRole.SCHEDULER:
            raise ValueError("ScenarioConnector models the scheduler role only; the sim mirrors the worker")
        self.block_size = kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size
        self.held: dict[str, int] = {}
        self.pending: list[ExternalLoad] = []

    def hold(self, request_id: str, num_tokens: int) -> None:
        self.held[request_id] = num_tokens

    # ------------------------------------------------------------ scheduler side

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        held = min(self.held.get(request.request_id, 0), request.num_prompt_tokens - 1)
        held -= held % self.block_size
        return max(held - num_computed_tokens, 0), False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        if num_external_tokens:
            self.pending.append(ExternalLoad(request.request_id, num_external_tokens,
                                             tuple(tuple(ids) for ids in blocks.get_block_ids())))

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        meta = ScenarioConnectorMetadata(loads=self.pending)
        self.pending = []
        return meta

    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]) -> tuple[bool, None]:
        return False, None

    # ------------------------------------------------------------ worker side (mirrored, not run)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the sim's runner mirror applies ScenarioConnector's loads")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError("the sim's runner mirror applies ScenarioConnector's loads")

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        raise NotImplementedError("ScenarioConnector holds what the scenario declares; it saves nothing")

    def wait_for_save(self) -> None:
        raise NotImplementedError("ScenarioConnector holds what the scenario declares; it saves nothing")
