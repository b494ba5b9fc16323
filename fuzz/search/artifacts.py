"""A finding for an input that killed or hung the harness (a libFuzzer artifact, or a dead worker's in-flight input).

Invariant: its signature names the kind (``worker-crash``, ``hang``, ``worker-oom``), the error (the exception in the
worker's last lines, else how it ended) and the scenario's conditions; the bundle keeps those lines."""

from __future__ import annotations

import re

from fuzz.model.deadline import STUCK_EXIT
from fuzz.model.result import RunResult
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.finding import Finding
from fuzz.oracle.signature import artifact_signature
from fuzz.oracle.verdict import Verdict, class_of_signature, slug
from fuzz.sandbox.channel import describe_exit
from fuzz.search.mutate import decode

EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::|$)")


def error_in(log_tail: str) -> str | None:
    """The exception type the worker's last lines name (``ValueError: ...``), if any."""
    return next((m.group(1).rsplit(".", 1)[-1] for ln in reversed(log_tail.splitlines())
                 if (m := EXCEPTION_LINE.match(ln.strip()))), None)


def death(returncode: int) -> tuple[str, str]:
    """(kind, how the worker ended): ``hang``/``ignored-its-deadline`` when it exited itself on an ignored deadline
    (``exit_when_stuck``), else ``worker-crash``/its exit as a signature word (``exit-code-0``)."""
    if returncode == STUCK_EXIT:
        return "hang", "ignored-its-deadline"
    return "worker-crash", slug(describe_exit(returncode).removeprefix("was ").removeprefix("exited "))


def crash_finding(kind: str, data: bytes, log_tail: str, candidate: str, reference: str,
                  ended: str | None = None, artifact: str | None = None) -> Finding:
    """The finding for input ``data``; ``ended``: how the worker ended, where no exception names the error."""
    scenario = decode(data)
    error = error_in(log_tail) or ended or "signal"
    sig = artifact_signature(kind, error, scenario)
    summary = f"the harness {'hung on' if kind == 'hang' else 'died on'} this input ({error})"
    details = {"artifact": artifact, "log": log_tail[-4000:]}
    cls = class_of_signature(sig)
    verdict = Verdict(cls.status, {cls.name: [Divergence(kind, "candidate", summary, details=details)]})
    return Finding(sig, scenario, scenario, verdict, candidate, reference, RunResult("sim", candidate, sig))
