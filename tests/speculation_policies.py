"""Splits whose answers depend on every call they have seen, for ``tests/test_speculation.py``: each answers as
vLLM's split but counts its calls on the scheduler it is given (a write on its view, kept for the object's life;
read from the view's own attributes, so counting asks the deciding process nothing), so a run whose child saw one
call too many, too few, or the scheduler as another object, answers differently."""

from __future__ import annotations

import os
import time
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler

_VLLM = Scheduler.__dict__["_mamba_block_aligned_split"]
EVERY = 7  # ``counting`` stops one token short at every EVERY-th call of a run
AT = 9  # the call of a run at which ``exiting``, ``raising`` and ``hanging`` do what they are named for


def _count(scheduler: Any) -> int:
    scheduler.gdnfuzz_calls = vars(scheduler).get("gdnfuzz_calls", 0) + 1
    return scheduler.gdnfuzz_calls


def counting(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
             num_external_computed_tokens: int = 0) -> int:
    got = _VLLM(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
    return got - 1 if _count(self) % EVERY == 0 and got > 1 else got


def asking(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
           num_external_computed_tokens: int = 0) -> int:
    """Reads what no snapshot holds at every call (the request's preemptions): every call asks."""
    got = _VLLM(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
    return got - 1 if request.num_preemptions and got > 1 else got


def _at_call(act: Any) -> Any:
    def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
              num_external_computed_tokens: int = 0) -> int:
        if _count(self) == AT:
            act()
        return _VLLM(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)

    return split


def _raise() -> None:
    raise ValueError("the ninth call")


def _hang() -> None:
    while True:
        time.sleep(0.05)


exiting = _at_call(lambda: os._exit(3))
raising = _at_call(_raise)
hanging = _at_call(_hang)
