"""The process the pytest plugin (``gdnfuzz_pytest``) replays its corpus items in: ``python -P -m
fuzz.pytest_server IMPORT_PATH_JSON``, one per pytest session, spoken to in JSON lines over its stdin
and stdout.

A request is ``{"scenario": PATH, "candidate": P, "reference": R, "fail_on": CLASS}`` (PATH as the user
would type it, relative to this process's working directory, the pytest invocation directory); the reply
is ``{"outcome": O, "message": one line or two}``, ``O`` one of:
- ``pass``: nothing ``fail_on`` counts (``fuzz.oracle.verdict.outcome`` ``clean``);
- ``xfail``: a finding the reference shares (``known``), named with its summary;
- ``fail``: the candidate's own finding (``new``): the verdict, its summary and the ``gdnfuzz replay``
  command that reproduces it;
- ``usage``: a policy that cannot be loaded (gdnfuzz's one-line error): a setting of the session, so the
  plugin ends the session with it as a usage error instead of failing every item;
- ``error``: no verdict: a file to fix (gdnfuzz's one-line error), or gdnfuzz's own failure (one line
  here, its traceback on stderr).

Invariants: the replay is ``gdnfuzz replay``'s (``fuzz.oracle.differential.replay`` on the sim tier,
judged by ``finding_signature`` and ``outcome``) inside one deciding scope kept for the process's life,
so a candidate's code runs in a sandbox child (``fuzz.sandbox``) kept warm from one item to the next.
Nothing but replies reaches the real stdout: what the replayed code prints goes to stderr. The import
path is the one the plugin passes (gdnfuzz's own root first, so a project's own ``fuzz`` or ``workers``
never shadows gdnfuzz's, then the pytest process's, so ``module:attr`` candidates resolve as they did
there); ``PYTHONSAFEPATH`` in the environment keeps the children this starts on gdnfuzz's root too.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import traceback
from typing import Any

from fuzz.errors import GdnfuzzError
from fuzz.model.policies import PolicyError, resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import replay_argv
from fuzz.oracle.verdict import FailOn, finding_signature, outcome
from fuzz.sandbox.scope import deciding
from fuzz.verbosity import set_verbosity


def judge(shown: str, candidate: str, reference: str, fail_on: FailOn) -> dict[str, str]:
    """One item's reply: the scenario file ``shown`` replayed under ``candidate`` and ``reference``."""
    scenario, _ = load_scenario(shown)
    replayed = replay(scenario, resolve_policy(candidate), resolve_policy(reference), "sim")
    sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
    if outcome(sig) == "known":  # not the candidate's: a bug of the reference, reported, never failing
        return {"outcome": "xfail", "message": f"{reference} is wrong there too ({sig}): {replayed.verdict.summary}"}
    if outcome(sig) == "new":
        command = shlex.join(replay_argv(shown, candidate, reference, "sim", fail_on))
        return {"outcome": "fail", "message": f"{shown}: verdict {replayed.verdict.status} ({sig}): "
                                              f"{replayed.verdict.summary}\n  reproduce: {command}"}
    return {"outcome": "pass", "message": ""}


def answer(request: dict[str, Any]) -> dict[str, str]:
    """:func:`judge`'s reply to ``request``, or an ``error`` reply saying in one line why there is no verdict."""
    shown = str(request.get("scenario"))
    try:
        return judge(shown, str(request["candidate"]), str(request["reference"]), FailOn(request["fail_on"]))
    except PolicyError as exc:
        return {"outcome": "usage", "message": str(exc)}
    except GdnfuzzError as exc:  # a file to fix: its own one line
        return {"outcome": "error", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - gdnfuzz's own failure: one line in the item, the traceback on stderr
        traceback.print_exc()
        return {"outcome": "error", "message": f"{shown}: {type(exc).__name__}: {exc}".splitlines()[0]}


def main() -> None:
    """``IMPORT_PATH_JSON``: serve requests from stdin until it closes."""
    sys.path[:] = json.loads(sys.argv[1])
    set_verbosity()  # vLLM's INFO and WARNING lines are not the items' output
    replies = os.fdopen(os.dup(1), "w")  # not inherited by the children this starts
    requests = os.fdopen(os.dup(0), "r")
    os.dup2(2, 1)  # whatever the replayed code prints goes to stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    with deciding():
        for line in requests:
            replies.write(json.dumps(answer(json.loads(line))) + "\n")
            replies.flush()


if __name__ == "__main__":
    main()
