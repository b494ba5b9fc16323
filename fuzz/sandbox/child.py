"""The sandbox child: ``python -m fuzz.sandbox.child FD`` loads policies and runs them on a tier, for the
deciding process at the other end of ``FD`` (``fuzz.sandbox.channel``).

Requests and answers (one JSON object each):
- ``{"op": "resolve", "spec": S}`` -> ``{"policy": {name, description, checkout, source}}`` or
  ``{"input_error": one line}`` (the policy cannot be used: exit 2 in the parent);
- ``{"op": "run", "tier": T, "scenario": {...}, "policy": {"spec": S, "follows": [R, m] | null},
  "reference": R | null}`` -> ``{"run": RunResult.to_dict()}``, ``{"rejected": one line}`` (a
  configuration vLLM refuses) or ``{"input_error": one line}``.
Anything else that goes wrong is ``{"failed": one line}``. Invariant: nothing here decides a verdict;
the parent judges the runs it receives, and an answer that never comes is a fault of the run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from fuzz.errors import ConfigRejected, InputError
from fuzz.model.policies import Policy, following, load_policy
from fuzz.model.scenario import Scenario
from fuzz.sandbox.channel import serve
from fuzz.tiers import local_executor
from fuzz.verbosity import follow_environment

follow_environment()  # first in a fork server's preload: before it imports vLLM, whose import warns
_loaded: dict[str, Policy] = {}


def _policy(spec: str) -> Policy:
    if spec not in _loaded:
        _loaded[spec] = load_policy(spec)
    return _loaded[spec]


def _resolve(request: dict[str, Any]) -> dict[str, Any]:
    policy = _policy(request["spec"])
    return {"policy": {"name": policy.name, "description": policy.description, "checkout": policy.checkout,
                       "source": list(policy.defined_at()) if policy.checkout is None else None}}


def _run(request: dict[str, Any]) -> dict[str, Any]:
    wanted = request["policy"]
    policy = _policy(wanted["spec"])
    if wanted.get("follows"):
        reference_spec, times = wanted["follows"]
        policy = following(policy, _policy(reference_spec), int(times))
    reference = _policy(request["reference"]) if request.get("reference") else None
    scenario = Scenario.from_dict(request["scenario"])
    return {"run": local_executor(request["tier"]).run(scenario, policy, reference).to_dict()}


OPS = {"resolve": _resolve, "run": _run}


def handle(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return OPS[request["op"]](request)
    except ConfigRejected as exc:
        return {"rejected": str(exc)}
    except InputError as exc:
        return {"input_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the parent says it in one line (exit 5)
        return {"failed": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def main() -> None:
    """``FD SYS_PATH_JSON``: the parent's import path, so its ``module:attr`` specs resolve here too."""
    sys.path[:] = json.loads(sys.argv[2])
    serve(int(sys.argv[1]), lambda: {"ready": os.getpid()}, handle)


if __name__ == "__main__":
    main()
