"""The sandbox child: loads one policy and answers its split calls, for the deciding process at the other
end of its channel (``fuzz.sandbox.channel``; started as ``MODULE FD SYS_PATH_JSON``).

Requests and answers (one JSON object each):
- ``{"op": "resolve", "spec": S}`` -> ``{"policy": {"source": [file, line]}}`` or
  ``{"input_error": one line}`` (the policy cannot be used: exit 2 in the parent);
- ``{"op": "split", "spec": S, "args": [num_new_tokens, local, external], "snapshot": {...}, "ids": {...}}`` ->
  ``{"value": V}`` (what the split returned, where it is a JSON value), ``{"other": description}`` (it
  returned something else) or ``{"raised": description}``; while the split runs, reading the scheduler
  or the request asks the parent (``fuzz.sandbox.views``);
- the same with ``"expect": E``: a speculative call (``fuzz.sandbox.speculation``), answered the same way while
  every earlier speculative call was answered ``{"value": E}`` with the ``E`` it expected and asked nothing;
  once one was not, the later ones of its ``"run"`` are dropped without an answer (they were made on a path
  the split did not choose); ``{"op": "settle"}`` -> ``{"settled": true}``, once every earlier call is answered.
Anything else that goes wrong is ``{"failed": one line}``.

Invariant: nothing here decides anything. The split gets views of the deciding process's scheduler and
request (``fuzz.sandbox.views``), and what the parent takes from this process is the split's answer,
nothing else: the scheduler, the runner mirror, the audit and the judge run in the parent.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from fuzz.errors import InputError
from fuzz.model.checkout import unfit_for_installed
from fuzz.model.policies import Policy, describe_value, load_policy
from fuzz.sandbox.channel import Ask, serve
from fuzz.sandbox.speculation import agrees
from fuzz.sandbox.views import Known, Written, views
from fuzz.verbosity import follow_environment

follow_environment()  # first in a fork server's preload: before it imports vLLM, whose import warns

MAX_STRING = 200  # a longer string returned is described (and cut), as the contract's message would cut it
_loaded: dict[str, Policy] = {}
_written = Written()  # what the split set on the views it was given, kept as long as their objects live


def _policy(spec: str) -> Policy:
    if spec not in _loaded:
        _loaded[spec] = load_policy(spec)
    return _loaded[spec]


def _resolve(request: dict[str, Any], ask: Ask) -> dict[str, Any]:
    return {"policy": {"source": list(_policy(request["spec"]).defined_at())}}


def _split(request: dict[str, Any], ask: Ask) -> dict[str, Any]:
    split = _policy(request["spec"]).split
    scheduler, vllm_request = views(ask, Known(request["snapshot"]), request["ids"], _written)
    try:
        got = split(scheduler, vllm_request, *request["args"])
    except BaseException as exc:  # noqa: BLE001 - whatever the split raises is its answer, reported by the parent
        unfit = unfit_for_installed(exc)  # a checkout's split reaching for what the installed vLLM lacks
        raised = {"raised": describe_value(exc)}  # what the parent says where it did not answer what is lacking
        return {"unfit": unfit, **raised} if unfit is not None else raised
    return answer(got)


def answer(got: Any) -> dict[str, Any]:
    """The split's return value as the parent reads it: the value itself where JSON holds it exactly."""
    if type(got) in (bool, int, float, type(None)) or (type(got) is str and len(got) <= MAX_STRING):
        try:
            json.dumps(got)  # NaN and infinities included (Python's JSON writes and reads them)
            return {"value": got}
        except ValueError:  # an int too long to write
            pass
    return {"other": describe_value(got)}


class _Speculating:
    """The speculative run (``run``) whose calls are dropped: one of its calls was answered otherwise than the
    deciding process expected, or asked it something, so every later one was made on a path the split did not
    choose (on the expected answer's, or while the question waited)."""

    left: Any = None


def _call(request: dict[str, Any], ask: Ask) -> dict[str, Any] | None:
    """A split call; one with ``expect`` is speculative (``fuzz.sandbox.speculation``): answered (whatever the
    answer) while its run is on the chosen path, dropped unanswered after it left."""
    if "expect" not in request:
        return _split(request, ask)
    run = request.get("run")
    if run == _Speculating.left:
        return None
    asked = []

    def noted(question: Any) -> Any:
        asked.append(question)
        return ask(question)

    _Speculating.left = run  # until the answer is known to agree (a split that ends this process answers nothing)
    got = _split(request, noted)
    if not asked and agrees(got, request["expect"]):
        _Speculating.left = None
    return got


def _settle(request: dict[str, Any], ask: Ask) -> dict[str, Any]:
    return {"settled": True}


OPS = {"resolve": _resolve, "split": _call, "settle": _settle}


def handle(request: dict[str, Any], ask: Ask) -> dict[str, Any] | None:
    try:
        return OPS[request["op"]](request, ask)
    except InputError as exc:
        return {"input_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the parent says it in one line
        return {"failed": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def main() -> None:
    """``FD SYS_PATH_JSON``: the parent's import path, so its ``module:attr`` specs resolve here too."""
    sys.path[:] = json.loads(sys.argv[2])
    serve(int(sys.argv[1]), lambda: {"ready": os.getpid()}, handle)


if __name__ == "__main__":
    main()
