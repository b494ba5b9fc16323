"""Whole-branch mode on the sim tier: a checkout's scheduling code in a candidate process of its own, driven
step by step (``schedule``, ``update``) from the deciding process, which runs everything that judges it.

Invariants: only what the branch's scheduler produced crosses, as JSON, and no checkout module is imported here;
every wait is bounded; a branch unfit for the installed vLLM fails with :class:`BranchError` (exit 2, one line),
never a finding; other exceptions of its scheduler keep their type name; a child that exits or hangs mid-run is
:class:`~fuzz.model.policies.CandidateGone`."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from fuzz.errors import ConfigRejected
from fuzz.model.checkout import CheckoutMismatch
from fuzz.model.deadline import deadline_seconds
from fuzz.model.scenario import Scenario
from fuzz.sandbox.channel import ChildFailed, JsonChild
from fuzz.sandbox.remote import gone, run_bound
from fuzz.sandbox.scope import load_timeout
from workers.sim import model_info


class BranchError(CheckoutMismatch):
    """The checkout's scheduling code cannot run on the installed vLLM (one line says what it lacks)."""


class BranchRunner:
    """The deciding process's side: one warm child per checkout, started on first use and after it is gone."""

    def __init__(self, checkout: str, start_timeout: float | None = None):
        self.checkout = checkout
        self.child = JsonChild("workers.sim.branch_child", [checkout, str(model_info.cache_dir())],
                               start_timeout or load_timeout())
        # a runner nobody closes (a command that exits with its executor open) still stops its child and
        # removes the child's scratch directory, when collected or at this interpreter's exit
        weakref.finalize(self, _close_in_owner, self.child, os.getpid())

    def _start(self) -> None:
        try:
            ready = self.child.start()
        except ChildFailed as exc:
            raise BranchError(f"branch:{self.checkout}: the process loading the branch {exc.how}") from None
        if "error" in ready:
            self.child.close()
            raise BranchError(f"branch:{self.checkout}: {ready['error']}")

    def exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """One request to the branch's process; its answer, or the exception its scheduler raised there."""
        self._start()
        try:
            answer = self.child.call(message, run_bound(deadline_seconds()))
        except ChildFailed as exc:
            raise gone(exc, f"branch:{self.checkout}") from None
        except BaseException:
            self.child.kill()  # interrupted mid-exchange (the run's deadline): its answer must never be read later
            raise
        if "rejected" in answer:
            raise ConfigRejected(str(answer["rejected"]))
        if "unfit" in answer:
            raise BranchError(f"branch:{self.checkout}: {answer['unfit']}")
        if "raised" in answer:
            name, message_text = answer["raised"]
            raise raised_as(str(name), str(message_text))
        if "error" in answer:
            raise RuntimeError(str(answer["error"]))
        return answer

    def scheduler(self, scenario: Scenario, num_blocks: int, external: dict[str, int],
                  on_violation: Callable[[Any, str], None]) -> RemoteScheduler:
        """The branch's fresh scheduler for one run of ``scenario``, after this process built its configs."""
        model_info.warm(scenario.engine, num_blocks, bool(external))
        ready = self.exchange({"op": "build", "scenario": scenario.to_dict(), "num_blocks": num_blocks,
                               "external": external})
        return RemoteScheduler(self, ready["scheduler"], on_violation)

    def close(self) -> None:
        self.child.close()


def _close_in_owner(child: JsonChild, owner: int) -> None:
    """Close ``child`` only in the process that started it, never in a forked one that exits."""
    if os.getpid() == owner:
        child.close()


_RAISED: dict[str, type[Exception]] = {}


def raised_as(name: str, message: str) -> Exception:
    """The branch scheduler's exception as one here of a class with the same name (``ValueError: ...``, as the
    installed side's), never the branch's own class."""
    name = name if name.isidentifier() else "Exception"
    if name not in _RAISED:
        _RAISED[name] = type(name, (BranchRaised,), {})
    return _RAISED[name](message)


class BranchRaised(Exception):
    """An exception raised by the branch's scheduler in its process (subclassed under the original name)."""


class ShadowRequest:
    """A request as the deciding process knows it in whole-branch mode: its prompt, and what the branch reported
    since (output tokens, progress, status, block hashes)."""

    def __init__(self, request_id: str, prompt: list[int]):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt)
        self.num_prompt_tokens = len(prompt)
        self.output_token_ids: list[int] = []
        self.all_token_ids: list[int] = list(prompt)
        self.num_computed_tokens = 0
        self.block_hashes: list[bytes] = []
        self.status: Any = "WAITING"
        self.finished = False

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    def is_finished(self) -> bool:
        return self.finished

    def apply(self, state: dict[str, Any]) -> None:
        """What the branch reported after a step: ``out`` is [first index, tokens from there on]."""
        start, tokens = state["out"]
        del self.output_token_ids[start:]
        self.output_token_ids += [int(t) for t in tokens]
        self.all_token_ids = self.prompt_token_ids + self.output_token_ids
        self.num_computed_tokens = int(state["computed"])
        self.status = _Status(str(state["status"]))
        self.finished = bool(state["finished"])
        self.block_hashes += [bytes.fromhex(h) for h in state["hashes"]]


class _Status(str):
    """A request status as the branch named it (``str()`` gives the name, as vLLM's enum does)."""


class RemoteScheduler:
    """The slice of vLLM's ``Scheduler`` the sim loop uses, answered by the branch's process in two exchanges a
    step (runner output sent at the next read); also the run's Mamba hash index (:meth:`current`)."""

    def __init__(self, runner: BranchRunner, built: dict[str, Any], on_violation: Callable[[Any, str], None]):
        self.runner, self.on_violation = runner, on_violation
        self.hash_block_size = int(built["hash_block_size"])
        self.use_eagle_block_drop = bool(built["use_eagle_block_drop"])
        self.kv_cache_config = SimpleNamespace(cache_hit_alignment_tokens=built["cache_hit_alignment_tokens"])
        self.max_num_scheduled_tokens = 0
        self.requests: dict[str, ShadowRequest] = {}
        self.arrivals: list[dict[str, Any]] = []
        self.aborts: list[str] = []
        self.pending: dict[str, Any] | None = None  # the runner's output not yet sent
        self.entries: dict[bytes, tuple[Any, ...]] = {}
        self.any_requests = False

    def admit(self, request_id: str, prompt: list[int], max_tokens: int) -> ShadowRequest:
        self.arrivals.append({"id": request_id, "prompt": prompt, "max_tokens": max_tokens})
        shadow = self.requests[request_id] = ShadowRequest(request_id, prompt)
        return shadow

    def finish_requests(self, request_id: str, status: Any) -> None:
        self.aborts.append(request_id)

    def has_requests(self) -> bool:
        self._flush(sync=True)
        return self.any_requests

    def schedule(self) -> Any:
        self._flush()
        answer = self.runner.exchange({"op": "schedule", "arrivals": self.arrivals, "aborts": self.aborts,
                                       "budget": self.max_num_scheduled_tokens})
        self.arrivals, self.aborts = [], []
        for rid, detail in answer["contract"]:
            self.on_violation(self.requests[rid], str(detail))
        return _output(answer["output"])

    def update_from_output(self, output: Any, model_output: Any) -> None:
        self.pending = {"req_ids": list(model_output.req_ids),
                        "sampled": [list(map(int, t)) for t in model_output.sampled_token_ids], "drafts": None}

    def update_draft_token_ids(self, drafts: Any) -> None:
        assert self.pending is not None
        self.pending["drafts"] = [list(drafts.req_ids), [list(map(int, d)) for d in drafts.draft_token_ids]]

    def current(self) -> dict[bytes, tuple[Any, ...]]:
        self._flush()
        return self.entries

    def _flush(self, sync: bool = False) -> None:
        """Send the runner's pending output (with ``sync``, the pending arrivals and aborts) and take in the reply."""
        if self.pending is None and not (sync and (self.arrivals or self.aborts)):
            return
        answer = self.runner.exchange({"op": "update", "runner": self.pending, "arrivals": self.arrivals,
                                       "aborts": self.aborts})
        self.pending, self.arrivals, self.aborts = None, [], []
        for rid, state in answer["requests"].items():
            self.requests[rid].apply(state)
        for key in answer["unindexed"]:
            self.entries.pop(bytes.fromhex(key), None)
        for key, blocks in answer["index"]:  # in place, as ``MambaHashIndex.current`` keeps its own
            self.entries[bytes.fromhex(key)] = tuple(SimpleNamespace(block_id=int(b)) for b in blocks)
        if answer["order"] is not None:  # the branch's index order, where applying the delta did not give it
            order = [bytes.fromhex(key) for key in answer["order"]]
            if set(order) != set(self.entries) or len(order) != len(self.entries):
                raise RuntimeError("the branch's process sent an index order that is not its index's keys")
            reordered = {key: self.entries[key] for key in order}
            self.entries.clear()
            self.entries.update(reordered)
        self.any_requests = bool(answer["has_requests"])


def _output(raw: dict[str, Any]) -> SimpleNamespace:
    """A ``SchedulerOutput`` as the branch's process wrote it, with the attributes the sim's loop reads."""
    cached = raw["cached"]
    return SimpleNamespace(
        finished_req_ids=set(raw["finished"]), preempted_req_ids=set(raw["preempted"]),
        new_block_ids_to_zero=list(raw["zero"]),
        kv_cache_block_copies=[SimpleNamespace(src_block_id=s, dst_block_id=d) for s, d in raw["copies"]],
        kv_connector_metadata=SimpleNamespace(loads=[SimpleNamespace(request_id=r) for r in raw["loads"]]),
        scheduled_new_reqs=[SimpleNamespace(req_id=r, block_ids=tuple(tuple(g) for g in b), num_computed_tokens=n)
                            for r, b, n in raw["new"]],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=list(cached["req_ids"]), resumed_req_ids=set(cached["resumed"]),
            new_block_ids=[None if b is None else tuple(tuple(g) for g in b) for b in cached["new_block_ids"]],
            num_computed_tokens=list(cached["num_computed_tokens"])),
        num_scheduled_tokens=dict(raw["num_scheduled"]), scheduled_spec_decode_tokens=dict(raw["spec"]),
        total_num_scheduled_tokens=int(raw["total"]))
