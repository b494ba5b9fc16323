"""The process the pytest plugin replays corpus items in (one a session), over JSON lines on stdin and stdout.
Invariants: replay is ``gdnfuzz replay``'s on the sim tier, in one deciding scope for the process's life; only replies
reach the real stdout; the import path is the plugin's (gdnfuzz's root first)."""

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
    """``shown`` replayed: ``pass``, ``xfail`` (the reference is wrong there too) or ``fail`` (the candidate's own)."""
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
    """:func:`judge`'s reply, or a ``usage``/``error`` reply saying in one line why there is no verdict."""
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
