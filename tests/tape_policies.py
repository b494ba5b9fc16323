"""Candidates that misbehave against their answer tape (``fuzz.sandbox.tape``), for ``tests/test_tape.py``.

Each answers as the installed vLLM's split does; in its tape child (the one running a whole run, told apart by
the recorder on its stack) it does one hostile thing as well, at the call :data:`AT`.
"""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Any

from fuzz.model.policies import BUILTINS
from fuzz.sandbox.views import presented

AT = 2
_vllm = BUILTINS["vllm"][0]
_calls = [0]


def _recorder() -> Any:
    """The tape's recorder, where this call is one of a tape child's run (None in the per-call child)."""
    frame = sys._getframe(1)
    while frame is not None:
        found = frame.f_locals.get("self")
        if type(found).__name__ == "_Recorder":
            return found
        frame = frame.f_back
    return None


def _hostile(self: Any, request: Any, args: tuple[int, ...], act: Any) -> int:
    recorder = _recorder()
    if recorder is not None:
        _calls[0] = recorder.count
        if recorder.count == AT:
            act(recorder, self, request, args)
    return _vllm(self, request, *args)


def changes_its_scheduler(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, _: Any) -> None:
        scheduler.max_num_scheduled_tokens = 1 + scheduler.max_num_scheduled_tokens // 2
    return _hostile(self, request, args, act)


def changes_its_request(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, _: Any) -> None:
        req.num_computed_tokens += 1
    return _hostile(self, request, args, act)


def random_answers(self: Any, request: Any, num_new_tokens: int, *rest: int) -> int:
    return random.randint(0, num_new_tokens)


def time_answers(self: Any, request: Any, num_new_tokens: int, *rest: int) -> int:
    return time.perf_counter_ns() % (num_new_tokens + 1)


def tape_for_calls_not_made(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, args: Any) -> None:  # its own call's entry, again and again
        entry = [[*args, 0, 0][:3], presented({"self": scheduler, "request": req}), {"value": 0}]
        recorder.send({"tape": [entry] * 50})
    return _hostile(self, request, args, act)


def truncated_tape(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, _: Any) -> None:  # a well-formed tape, ended early
        recorder.flush(0.0)
        recorder.send({"done": recorder.count})
    return _hostile(self, request, args, act)


def miscounted_tape(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, _: Any) -> None:  # says more entries than it sent
        recorder.flush(0.0)
        recorder.send({"done": recorder.count + 5})
    return _hostile(self, request, args, act)


def oversized_tape(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, _: Any) -> None:
        recorder.send({"tape": [[[0, 0, 0], "x" * (2 << 20), {"value": 0}]]})
    return _hostile(self, request, args, act)


def wrong_digests(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, args: Any) -> None:  # answers 0 for the next calls
        recorder.send({"tape": [[[*args, 0, 0][:3], "0" * 24, {"value": 0}]] * 4})
    return _hostile(self, request, args, act)


def breaks_its_run(self: Any, request: Any, *args: int) -> int:
    def act(recorder: Any, scheduler: Any, req: Any, _: Any) -> None:  # its child's scheduler fails right after
        scheduler.kv_cache_manager = None
    return _hostile(self, request, args, act)


def stalls_mid_tape(self: Any, request: Any, *args: int) -> int:
    def act(*_: Any) -> None:
        time.sleep(600)
    return _hostile(self, request, args, act)


def exits_mid_tape(self: Any, request: Any, *args: int) -> int:
    def act(*_: Any) -> None:
        os._exit(3)
    return _hostile(self, request, args, act)


def answers_two_ways(self: Any, request: Any, num_new_tokens: int, *rest: int) -> int:
    """The tape child answers as vLLM and leaves after call :data:`AT`; the per-call child answers one less."""
    recorder = _recorder()
    if recorder is None:
        return max(_vllm(self, request, num_new_tokens, *rest) - 1, 0)
    if recorder.count == AT:
        recorder.flush(0.0)
        os._exit(0)
    return _vllm(self, request, num_new_tokens, *rest)
