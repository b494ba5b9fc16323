"""The sandbox child: bound at start to one policy (``MODULE FD SYS_PATH_JSON SPEC``), it answers for that
policy alone, for the deciding process at the other end of its channel (``fuzz.sandbox.channel``).

Requests (one JSON object each; none names a policy):
- ``{"op": "resolve"}`` -> ``{"policy": {"source": [file, line]}}`` or ``{"input_error": one line}``;
- ``{"op": "split", "args": [n, local, external], "snapshot": {...}, "ids": {...}}`` -> ``{"value": V}``,
  ``{"other": description}`` or ``{"raised": description}``: one call on views of the deciding process's
  objects (``fuzz.sandbox.views``), whose reads may ask the parent;
- ``{"op": "run", "scenario": {...}, "max_steps": N, "model_infos": DIR}`` -> lines ``{"tape": [entry, ...]}``,
  then ``{"done": count}`` (and ``"ended"``: what the run raised, where an exception ended it): the whole run on
  this process's own scheduler, the split called in-process, one entry ``[args, presented digest, answer]`` per
  call (``fuzz.sandbox.tape`` checks them).
Anything else that goes wrong is ``{"failed": one line}``.

Invariant: nothing here decides anything; the parent takes answers from this process and checks each one
against its own run.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from dataclasses import replace
from typing import Any

from fuzz.errors import InputError
from fuzz.model.checkout import unfit_for_installed
from fuzz.model.policies import Policy, describe_value, load_policy
from fuzz.model.scenario import Scenario
from fuzz.sandbox.channel import Ask, Send, serve
from fuzz.sandbox.views import Known, Written, presented, views
from fuzz.tiers import REGISTRY, SCHEDULER_TIER
from fuzz.verbosity import follow_environment

follow_environment()  # first in a fork server's preload: before it imports vLLM, whose import warns

MAX_STRING = 200  # a longer string returned is described (and cut), as the contract's message would cut it
FLUSH_ENTRIES = 64  # a tape's entries sent in one line, at most
FLUSH_S = 0.002  # and at least this often while the run goes on (the first entry at once)
SPEC = ""  # the one policy this process answers for (``main``)
_loaded: list[Policy] = []
_written = Written()  # what the split set on the views it was given, kept as long as their objects live
_executors: dict[Any, Any] = {}


def _policy() -> Policy:
    if not _loaded:
        _loaded.append(load_policy(SPEC))
    return _loaded[0]


def _resolve(request: dict[str, Any], ask: Ask, send: Send) -> dict[str, Any]:
    return {"policy": {"source": list(_policy().defined_at())}}


def _split(request: dict[str, Any], ask: Ask, send: Send) -> dict[str, Any]:
    scheduler, vllm_request = views(ask, Known(request["snapshot"]), request["ids"], _written)
    return _answered(_policy().split, scheduler, vllm_request, request["args"])[0]


def _answered(split: Any, scheduler: Any, request: Any, args: list[int]) -> tuple[dict[str, Any], Any]:
    """The split's answer as the parent reads it, and what it raised (None where it returned)."""
    try:
        got = split(scheduler, request, *args)
    except BaseException as exc:  # noqa: BLE001 - whatever the split raises is its answer, reported by the parent
        unfit = unfit_for_installed(exc)  # a checkout's split reaching for what the installed vLLM lacks
        raised = {"raised": describe_value(exc)}
        return ({"unfit": unfit, **raised} if unfit is not None else raised), exc
    return answer(got), None


def answer(got: Any) -> dict[str, Any]:
    """The split's return value as the parent reads it: the value itself where JSON holds it exactly."""
    if type(got) in (bool, int, float, type(None)) or (type(got) is str and len(got) <= MAX_STRING):
        try:
            json.dumps(got)  # NaN and infinities included (Python's JSON writes and reads them)
            return {"value": got}
        except ValueError:  # an int too long to write
            pass
    return {"other": describe_value(got)}


class _Recorder:
    """The split as the child's own run calls it: each call's entry goes on the tape, sent in batches."""

    def __init__(self, split: Any, send: Send):
        self.split, self.send = split, send
        self.pending: list[list[Any]] = []
        self.count = 0
        self.flushed_at = 0.0

    def __call__(self, scheduler: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
                 num_external_computed_tokens: int = 0) -> Any:
        args = [num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens]
        digest = presented({"self": scheduler, "request": request})  # before the split can change what it reads
        got, raised = _answered(self.split, scheduler, request, args)
        self.pending.append([args, digest, got])
        self.count += 1
        now = time.monotonic()
        if self.count == 1 or len(self.pending) >= FLUSH_ENTRIES or now - self.flushed_at >= FLUSH_S:
            self.flush(now)
        if raised is not None:
            raise raised
        return got["value"] if "value" in got else _Other(got["other"])

    def flush(self, now: float) -> None:
        if self.pending:
            self.send({"tape": self.pending})
            self.pending = []
        self.flushed_at = now


class _Other:
    """A return value that is not a JSON value, as the parent sees it (the contract reports it)."""

    def __init__(self, description: str):
        self.description = description

    def __repr__(self) -> str:
        return self.description


def _run(request: dict[str, Any], ask: Ask, send: Send) -> dict[str, Any]:
    max_steps = request["max_steps"]
    if max_steps not in _executors:
        module, attr = REGISTRY[SCHEDULER_TIER].executor.split(":")
        _executors[max_steps] = getattr(importlib.import_module(module), attr)(max_steps=max_steps, audits=False)
    executor = _executors[max_steps]
    executor.model_infos = request["model_infos"]
    policy = _policy()
    recorder = _Recorder(policy.split, send)
    ended = ""
    try:
        executor.run(Scenario.from_dict(request["scenario"]), replace(policy, split=recorder))
    except Exception as exc:  # noqa: BLE001 - the run's own end (a config vLLM rejects), met by the deciding run too;
        ended = f"{type(exc).__name__}: {exc}"  # where it is not, the short tape is refused and the refusal says this
    recorder.flush(0.0)
    return {"done": recorder.count, "ended": ended} if ended else {"done": recorder.count}


OPS = {"resolve": _resolve, "split": _split, "run": _run}


def handle(request: dict[str, Any], ask: Ask, send: Send) -> dict[str, Any] | None:
    try:
        return OPS[request["op"]](request, ask, send)
    except InputError as exc:
        return {"input_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the parent says it in one line
        return {"failed": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def main() -> None:
    """``FD SYS_PATH_JSON SPEC``: the parent's import path (so ``module:attr`` specs resolve here too) and the
    one policy this process loads."""
    global SPEC
    sys.path[:] = json.loads(sys.argv[2])
    SPEC = sys.argv[3]
    serve(int(sys.argv[1]), lambda: {"ready": os.getpid()}, handle)


if __name__ == "__main__":
    main()
