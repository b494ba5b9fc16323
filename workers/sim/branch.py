"""Whole-branch mode on the sim tier: a checkout's scheduling code in a candidate process of its own.

``BranchRunner(checkout).run(scenario)`` ships the scenario to a child interpreter whose import
system serves the modules ``fuzz.model.checkout.overlay_modules`` lists (``vllm/v1/core/**``,
``vllm/v1/request.py``, ``vllm/v1/kv_cache_interface.py``) from the checkout instead of the installed
vLLM (``workers.sim.branch_child``), runs it there on the sim tier under the branch's own split (the ``vllm`` policy, which reads the
split off whatever ``Scheduler`` is imported), and gets the ``RunResult`` back as a dict.

Invariants:
- Isolation: the reference and the truth keep running in the caller on the installed vLLM; no
  module of the checkout is ever imported into the caller.
- The child installs its finder before anything imports vLLM, and never writes bytecode into the
  checkout.
- A branch that needs something the installed vLLM lacks (a name it imports, a module it expects)
  fails at start with :class:`BranchError` (exit 2), one line saying what is missing; an exception
  while a scenario runs is a fault of that run, as on the installed side.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from fuzz.errors import ConfigRejected, InputError
from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]


class BranchError(InputError):
    """The checkout's scheduling code cannot run on the installed vLLM (one line says what it lacks)."""


class BranchRunner:
    """The caller's side: one warm child per checkout, started on first use."""

    def __init__(self, checkout: str):
        self.checkout = checkout
        self._child: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    def _start(self) -> Connection:
        if self._conn is not None and self._child is not None and self._child.poll() is None:
            return self._conn
        self.close()
        ours, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self._child = subprocess.Popen(
            [sys.executable, "-c", f"from workers.sim.branch_child import serve; serve({self.checkout!r}, {theirs.fileno()})"],
            pass_fds=[theirs.fileno()], env=env, cwd=os.getcwd())
        theirs.close()
        self._conn = Connection(ours.detach())
        status, payload = self._receive()
        if status != "ready":
            self.close()
            raise BranchError(f"branch:{self.checkout}: {payload}")
        return self._conn

    def _receive(self) -> tuple[str, object]:
        assert self._conn is not None and self._child is not None
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return "error", f"the candidate process died (exit code {self._child.wait()})"

    def run(self, scenario: Scenario, policy_name: str) -> RunResult:
        """``scenario`` under the branch's whole scheduling code; a dead child is an exception fault."""
        from fuzz.model.result import Fault

        conn = self._start()
        conn.send(scenario.to_dict())
        status, payload = self._receive()
        if status == "ok":
            result = RunResult.from_dict(payload)  # type: ignore[arg-type]
            result.policy = policy_name
            return result
        if status == "rejected":
            raise ConfigRejected(str(payload))
        self.close()
        return RunResult(tier="sim", policy=policy_name, scenario_id=scenario.scenario_id(),
                         faults=[Fault(kind="exception", detail=str(payload))])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._child is not None:
            try:
                self._child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
        self._child = self._conn = None
