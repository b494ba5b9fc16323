"""Vetting a policy's module before gdnfuzz imports it: what the import does happens in a child first.

A policy module runs arbitrary code when it is imported. :func:`vet_import` imports it once in a
short-lived child interpreter (same ``sys.path``, same working directory) and reads how that went,
so a module that exits the process (``sys.exit``, ``os._exit``), raises (anything, ``SystemExit``
and ``KeyboardInterrupt`` included), hangs, or dies by a signal on import is a one-line reason, never
an exit code of gdnfuzz that could be read as a verdict. Invariant: :func:`vet_import` returns only
when the child imported the module and returned normally; otherwise it returns the reason.
A module that behaves differently the second time is still caught in-process by
``fuzz.model.policies`` (which catches every ``BaseException`` of the import), except for an exit
of the process itself, which only the child can see.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys

VET_TIMEOUT_S = 120.0  # importing a policy that imports vLLM takes ~10 s on a loaded machine
OK_MARK = "gdnfuzz-vet-ok"
RAISED_MARK = "gdnfuzz-vet-raised:"

# The child: import the module (or run the file), then report on stdout and leave at once with
# os._exit, so the module's atexit handlers and buffered output cannot change the answer.
_CHILD = f"""
import importlib, importlib.util, json, os, sys
sys.path[:] = json.loads(sys.argv[3])
kind, target = sys.argv[1], sys.argv[2]
try:
    if kind == "module":
        importlib.import_module(target)
    else:
        spec = importlib.util.spec_from_file_location("gdnfuzz_vetted_policy", target)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    line = "{OK_MARK}"
except BaseException as exc:
    try:
        line = "{RAISED_MARK}" + json.dumps(": ".join(filter(None, (type(exc).__name__, str(exc)))))
    except BaseException:
        line = "{RAISED_MARK}" + json.dumps(type(exc).__name__)
sys.stdout.flush()
os.write(1, ("\\n" + line + "\\n").encode())
os._exit(0)
"""


def vet_import(kind: str, target: str) -> str | None:
    """Import ``target`` (``kind`` ``"module"``: a module name; ``"file"``: a .py path) in a child
    interpreter; None when that went well, else why not, in one line. Asked again for an unchanged
    file (or the same module name), the first answer stands: one child per policy per process."""
    stamp = os.stat(target).st_mtime_ns if kind == "file" else 0
    return _vetted(kind, target, stamp)


@functools.cache
def _vetted(kind: str, target: str, stamp: int) -> str | None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, kind, target, json.dumps(sys.path)],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=VET_TIMEOUT_S, env=os.environ.copy(),
        )
    except subprocess.TimeoutExpired:
        return f"importing it did not finish within {VET_TIMEOUT_S:.0f} s"
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    last = lines[-1] if lines else ""
    if done.returncode == 0 and last == OK_MARK:
        return None
    if done.returncode == 0 and last.startswith(RAISED_MARK):
        return f"importing it raised {json.loads(last[len(RAISED_MARK):])}"
    if done.returncode < 0:
        number = -done.returncode
        name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
        return f"importing it killed the process with {name}"
    return f"importing it exited the process (exit code {done.returncode})"
