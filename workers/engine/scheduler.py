"""The Scheduler the engine tier installs through ``SchedulerConfig.scheduler_cls``: vLLM's own, plus two seams.

Per instance (no module state): ``split`` replaces ``_mamba_block_aligned_split``; ``observer(scheduler, output)``
runs after every ``schedule()``. With both unset it is exactly ``Scheduler``. The engine core must run in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) for the executor to reach the instance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

Observer = Callable[[Scheduler, Any], None]


class GdnfuzzScheduler(Scheduler):
    """vLLM's Scheduler whose chunk split dispatches to the current policy."""

    split: Callable[..., int] | None = None
    observer: Observer | None = None

    def _mamba_block_aligned_split(self, request: Any, num_new_tokens: int,
                                   num_new_local_computed_tokens: int = 0,
                                   num_external_computed_tokens: int = 0) -> int:
        if self.split is None:
            return super()._mamba_block_aligned_split(
                request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        return self.split(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)

    def schedule(self, throttle_prefills: bool = False) -> Any:
        output = super().schedule(throttle_prefills)
        if self.observer is not None:
            self.observer(self, output)
        return output
