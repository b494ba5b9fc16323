"""The engine tier: ``EngineExecutor().run(scenario, policy) -> RunResult`` on vLLM's engine in a warm child.

A crash or hang in vLLM never takes the caller down: an engine exception is an ``engine-crash`` fault (engines
rebuilt), a dead child an ``engine-crash`` with its exit code, a run past ``timeout_s`` a ``hang`` (child replaced).
``poison_verdict``: ``poisoned``; ``clean`` only when the canary is caught, else ``inconclusive``; ``unsupported``.
``logprob_divergence``: the largest top-k logprob gap up to the first differing greedy token (missing: infinite)."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import traceback
from multiprocessing.connection import Connection
from pathlib import Path

from fuzz.interpreter import python_command
from fuzz.model.deadline import deadline_seconds
from fuzz.model.policies import CandidateGone, Policy, resolve_policy
from fuzz.model.result import Fault, RequestOutcome, RunResult
from fuzz.model.scenario import Scenario
from fuzz.tiers import BaseExecutor

# Measured (bench/engine_throughput.py over the 14 corpus entries as written, MTP included, and 40
# `gdnfuzz gen --seed 5` scenarios, 2026-12-02): the reference-vs-truth gap of correct runs (bf16,
# different chunkings, partial hits) is 0.055..0.070 on all but one scenario, whose longest request
# reaches 0.123 over 8 decoded tokens; no greedy token left the other run's top-k. A state
# CANARY_OFFSET (8) tokens off moves a resumed request by 0..inf, a naive split's poisoned state by
# 0.122..inf: outputs alone cannot separate every poisoned run, which is why the state audit (noise
# 0.004, poisoned 1.3..1.5, tolerance 0.05) decides the engine verdicts and outputs only add evidence.
OUTPUT_TOLERANCE = 0.15
DEFAULT_TIMEOUT_S = 300.0
ROOT = Path(__file__).resolve().parents[2]  # the checkout: workers/ and fuzz/ import from it
CHILD_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}


def serve(fd: int) -> None:
    """Child main loop on socket ``fd``: one EngineSession, one run at a time, until EOF. A policy not built in
    loads in a sandbox child (``fuzz.sandbox``), never beside the engine and its audit."""
    from fuzz.sandbox.scope import ambient
    from workers.engine.session import EngineSession

    ambient()
    conn = Connection(fd)

    session = EngineSession()
    while True:
        try:
            scenario_dict, policy_spec, canary = conn.recv()
        except EOFError:
            return
        try:
            policy = None if policy_spec is None else resolve_policy(policy_spec)
            reply = ("ok", session.run(Scenario.from_dict(scenario_dict), policy, canary).to_dict())
        except CandidateGone as exc:  # the candidate's process ended or hung mid-step: the engine is rebuilt
            reply = ("fault", {"kind": exc.kind, "detail": exc.detail})
            session.close()
        except Exception:  # anything vLLM raises is a finding, reported with its traceback
            reply = ("crash", traceback.format_exc())
            session.close()
        try:
            conn.send(reply)
        except OSError:  # the parent is gone: so is the reason to run
            return


class EngineExecutor(BaseExecutor):
    tier = "engine"

    def __init__(self, timeout_s: float | None = None):
        self.timeout_s = timeout_s  # None: the per-scenario deadline in force (``--deadline``), else 300 s
        self._child: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    def _ensure_child(self) -> None:
        """Start the child: a fresh interpreter (not multiprocessing's spawn, which re-imports ``__main__``)."""
        if self._child is not None and self._child.poll() is None:
            return
        self.close()
        ours, theirs = socket.socketpair()
        env = {**os.environ, **CHILD_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self._child = subprocess.Popen(
            python_command("-c", "from fuzz.verbosity import follow_environment; follow_environment(); "
                                 f"from workers.engine.executor import serve; serve({theirs.fileno()})"),
            pass_fds=[theirs.fileno()], env=env, cwd=os.getcwd())  # policy paths as the user gave them
        theirs.close()
        self._conn = Connection(ours.detach())

    def close(self) -> None:
        """Stop the child process (engines are rebuilt on the next run)."""
        if self._conn is not None:
            self._conn.close()
        if self._child is not None:
            try:
                self._child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
        self._child = self._conn = None

    def deadline(self) -> float:
        """Seconds one engine call may take, engine start-up included."""
        return self.timeout_s or deadline_seconds(DEFAULT_TIMEOUT_S)

    def _call(self, scenario: Scenario, policy: Policy | None, canary: bool) -> RunResult:
        name = "truth" if policy is None else policy.name
        self._ensure_child()
        assert self._conn is not None and self._child is not None
        self._conn.send((scenario.to_dict(), None if policy is None else policy.spec, canary))
        fault: Fault
        timeout = self.deadline()
        if not self._conn.poll(timeout):
            self._child.kill()
            self.close()
            fault = Fault(kind="hang", detail=f"no result within {timeout:g} s; the engine was restarted")
        else:
            try:
                status, payload = self._conn.recv()
            except (EOFError, OSError):
                code = self._child.wait()
                self.close()
                status, payload = "crash", f"the engine process died (exit code {code})"
            if status == "ok":
                return RunResult.from_dict(payload)
            fault = Fault(**payload) if status == "fault" else Fault(kind="engine-crash", detail=payload)
        return RunResult(tier="engine", policy=name, scenario_id=scenario.scenario_id(), faults=[fault])

    def run(self, scenario: Scenario, policy: Policy, reference: Policy | None = None) -> RunResult:
        """One run of ``scenario`` under ``policy`` with prefix caching, state audit included."""
        return self._call(scenario, policy, canary=False)

    def truth(self, scenario: Scenario) -> RunResult:
        """The expected outputs: the same arrivals and budgets with prefix caching off."""
        return self._call(scenario, None, canary=False)

    def run_canary(self, scenario: Scenario, reference: Policy | None = None) -> RunResult:
        """``scenario`` under ``reference`` (default ``vllm``) with the first hashed slot corrupted."""
        return self._call(scenario, reference or resolve_policy("vllm"), canary=True)

    def canary_detected(self, scenario: Scenario) -> bool:
        """Whether the state audit reports the corrupted slot of a canary run of ``scenario``."""
        return self.canary_run(scenario)[1]

    def canary_run(self, scenario: Scenario) -> tuple[RunResult, bool]:
        canary = self.run_canary(scenario)
        return canary, canary_caught(canary)

    def as_run(self, scenario: Scenario) -> Scenario:
        """In align mode vLLM's engine uses B as the attention block too (see workers.engine.session)."""
        return scenario.with_engine(block_size=scenario.engine.mamba_block_size)

    @staticmethod
    def outputs_differ(a: RequestOutcome, b: RequestOutcome) -> bool:
        """The oracle's comparison on this tier: beyond OUTPUT_TOLERANCE, or a length change unless aborted."""
        if logprob_divergence(a, b) > OUTPUT_TOLERANCE:
            return True
        aborted = "FINISHED_ABORTED" in (a.finish_reason, b.finish_reason)
        return not aborted and len(a.output_tokens) != len(b.output_tokens)

    def __enter__(self) -> EngineExecutor:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def canary_caught(canary_run: RunResult) -> bool:
    """True when the audit of a canary run names the corrupted slot (it holds state@claimed-offset)."""
    from workers.engine.session import CANARY_OFFSET

    return any(p.held_tokens == p.claimed_tokens - CANARY_OFFSET for p in canary_run.poisoned)


def logprob_divergence(a: RequestOutcome, b: RequestOutcome) -> float:
    """Largest top-k logprob gap between two runs of one request (see the module docstring)."""
    worst = 0.0
    for i, (ta, tb) in enumerate(zip(a.output_tokens, b.output_tokens, strict=False)):
        top_a, top_b = (a.top_logprobs or [])[i], (b.top_logprobs or [])[i]
        if str(ta) not in top_b or str(tb) not in top_a:
            return math.inf
        worst = max([worst, *(abs(top_a[t] - top_b[t]) for t in top_a.keys() & top_b.keys())])
        if ta != tb:
            break
    return worst


def output_divergence(candidate: RunResult, other: RunResult) -> dict[str, float]:
    """``logprob_divergence`` of every request both runs completed, by request id."""
    return {rid: logprob_divergence(o, other.requests[rid]) for rid, o in candidate.requests.items()
            if rid in other.requests and o.output_tokens and other.requests[rid].output_tokens}
