"""Whole-branch mode's candidate process: the checkout's scheduling code served over the installed vLLM.

Over ``fuzz.sandbox.channel``: ``build`` (a fresh scheduler of the branch, split contract-checked, model infos
seeded), ``schedule`` (SchedulerOutput as JSON, contract faults), ``update`` (deltas since the last one, which
applied give exactly the full report); failures are ``raised``, ``rejected`` or ``unfit``. Invariants:
:class:`CheckoutFinder` is first on ``sys.meta_path`` before vLLM is imported; no bytecode; nothing here judges."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from fuzz.errors import ConfigRejected
from fuzz.model.checkout import CheckoutMismatch, overlay_modules, unfit_for_installed
from fuzz.sandbox.channel import Ask, Send, serve
from fuzz.verbosity import follow_environment
from workers.sim.branch import BranchError
from workers.sim.model_info import seed

MAMBA_GROUP = 1
MAX_MESSAGE = 4000  # of an exception the branch raised


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Serves the overlaid modules from the checkout; every other module comes from the installed vLLM."""

    def __init__(self, checkout: Path):
        self.modules = overlay_modules(checkout)

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        source = self.modules.get(fullname)
        if source is None:
            return None
        package = [str(source.parent)] if source.name == "__init__.py" else None
        return importlib.util.spec_from_file_location(fullname, source, submodule_search_locations=package)


def _import_branch(finder: CheckoutFinder) -> None:
    """Import every overlaid module now, so a missing dependency is one clear error at start."""
    import vllm

    for name in sorted(finder.modules):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise BranchError(f"the branch's {name} needs what the installed vLLM {vllm.__version__} lacks: "
                              f"{exc.msg.splitlines()[0]}") from None
        except Exception as exc:
            raise BranchError(f"the branch's {name} fails to import on the installed vLLM {vllm.__version__}: "
                              f"{type(exc).__name__}: {exc}") from None


class BranchRun:
    """One run's scheduler of the branch, and what of it was already reported."""

    def __init__(self, request: dict[str, Any]):
        from fuzz.model.policies import contract_checked, resolve_policy
        from fuzz.model.scenario import Scenario
        from workers.sim.hash_index import MambaHashIndex
        from workers.sim.scheduler import build_scheduler

        knobs = Scenario.from_dict(request["scenario"]).engine
        external = {str(k): int(v) for k, v in request["external"].items()}
        self.scheduler = build_scheduler(knobs, int(request["num_blocks"]), kv_connector=bool(external))
        for rid, tokens in external.items():
            self.scheduler.connector.hold(rid, tokens)
        self.violations: list[list[str]] = []
        split = contract_checked(resolve_policy("vllm").split,
                                 lambda req, detail: self.violations.append([req.request_id, detail]))
        self.scheduler._mamba_block_aligned_split = split.__get__(self.scheduler)
        self.index = MambaHashIndex(self.scheduler.kv_cache_manager.block_pool, MAMBA_GROUP)
        self.requests: dict[str, Any] = {}
        self.last_output: Any = None
        self.reported: dict[str, tuple[Any, ...]] = {}  # request -> what its last state sent said
        self.indexed: dict[Any, tuple[int, ...]] = {}  # hash key -> its block ids, as last sent

    def built(self) -> dict[str, Any]:
        s = self.scheduler
        return {"scheduler": {"hash_block_size": s.hash_block_size, "use_eagle_block_drop": s.use_eagle_block_drop,
                              "cache_hit_alignment_tokens": s.kv_cache_config.cache_hit_alignment_tokens}}

    def admit(self, arrivals: list[dict[str, Any]], aborts: list[str]) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request, RequestStatus

        from workers.sim.block_hashes import memoized_block_hasher

        hasher = memoized_block_hasher(self.scheduler.hash_block_size,
                                       self.scheduler.cache_config.prefix_caching_hash_algo)
        for new in arrivals:
            params = SamplingParams(max_tokens=int(new["max_tokens"]), temperature=0.0, ignore_eos=True)
            request = Request(str(new["id"]), [int(t) for t in new["prompt"]], params, None, block_hasher=hasher)
            self.requests[request.request_id] = request
            self.scheduler.add_request(request)
        for rid in aborts:
            self.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)

    def schedule(self, request: dict[str, Any]) -> dict[str, Any]:
        self.admit(request["arrivals"], request["aborts"])
        self.scheduler.max_num_scheduled_tokens = int(request["budget"])
        output = self.last_output = self.scheduler.schedule()
        violations, self.violations = self.violations, []
        return {"output": _encode_output(output), "contract": violations}

    def update(self, request: dict[str, Any]) -> dict[str, Any]:
        from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput

        runner = request.get("runner")
        if runner is not None:
            req_ids = list(runner["req_ids"])
            self.scheduler.update_from_output(self.last_output, ModelRunnerOutput(
                req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                sampled_token_ids=runner["sampled"]))
            if runner["drafts"] is not None:
                self.scheduler.update_draft_token_ids(DraftTokenIds(*runner["drafts"]))
        self.admit(request["arrivals"], request["aborts"])
        states = {}
        for rid, r in self.requests.items():
            state = self._state(rid, r)
            if state is not None:
                states[rid] = state
        added, removed, order = self._index_delta()
        return {"requests": states, "index": added, "unindexed": removed, "order": order,
                "has_requests": self.scheduler.has_requests()}

    def _state(self, rid: str, request: Any) -> dict[str, Any] | None:
        """What changed of ``request`` since its last report (None: nothing): output tokens from the first unsent (or
        from where it got shorter), unsent block hashes, the rest in full."""
        out, hashes = request.output_token_ids, request.block_hashes
        now = (len(out), request.num_computed_tokens, str(request.status), request.is_finished(), len(hashes))
        before = self.reported.get(rid)
        if before == now:
            return None
        sent_out, sent_hashes = (before[0], before[4]) if before is not None else (0, 0)
        self.reported[rid] = now
        start = min(sent_out, len(out))
        return {"out": [start, [int(t) for t in out[start:]]], "computed": now[1], "status": now[2],
                "finished": now[3], "hashes": [bytes(h).hex() for h in hashes[sent_hashes:]]}

    def _index_delta(self) -> tuple[list[list[Any]], list[str], list[str] | None]:
        """Mamba index entries new or changed since the last report, keys gone, and the full key order only where
        applying those (remove, then assign) would not reproduce the index's own order."""
        current = {key: tuple(b.block_id for b in blocks) for key, blocks in self.index.current().items()}
        changed = [key for key, ids in current.items() if self.indexed.get(key) != ids]
        gone = [key for key in self.indexed if key not in current]
        applied = dict(self.indexed)
        for key in gone:
            del applied[key]
        for key in changed:
            applied[key] = current[key]
        order = None if list(applied) == list(current) else [bytes(key).hex() for key in current]
        self.indexed = current
        return [[bytes(key).hex(), list(current[key])] for key in changed], [bytes(key).hex() for key in gone], order


def _encode_output(output: Any) -> dict[str, Any]:
    cached = output.scheduled_cached_reqs

    def groups(block_ids: Any) -> list[list[int]] | None:
        return None if block_ids is None else [list(g) for g in block_ids]

    return {
        "finished": sorted(output.finished_req_ids), "preempted": sorted(output.preempted_req_ids or ()),
        "zero": list(output.new_block_ids_to_zero or ()),
        "copies": [[c.src_block_id, c.dst_block_id] for c in output.kv_cache_block_copies or ()],
        "loads": [load.request_id for load in getattr(output.kv_connector_metadata, "loads", ())],
        "new": [[n.req_id, groups(n.block_ids), n.num_computed_tokens] for n in output.scheduled_new_reqs],
        "cached": {"req_ids": list(cached.req_ids), "resumed": sorted(cached.resumed_req_ids),
                   "new_block_ids": [groups(b) for b in cached.new_block_ids],
                   "num_computed_tokens": list(cached.num_computed_tokens)},
        "num_scheduled": dict(output.num_scheduled_tokens),
        "spec": {rid: list(t) for rid, t in output.scheduled_spec_decode_tokens.items()},
        "total": output.total_num_scheduled_tokens,
    }


def main() -> None:
    """``FD CHECKOUT``: overlay the checkout, load the branch (failure: the ready line), drive it until EOF."""
    fd, checkout = int(sys.argv[1]), sys.argv[2]
    model_infos = sys.argv[3] if len(sys.argv) > 3 else ""
    sys.dont_write_bytecode = True
    follow_environment()  # the parent's vLLM log level, before the branch's vLLM is imported
    finder = CheckoutFinder(Path(checkout))
    sys.meta_path.insert(0, finder)
    state: dict[str, BranchRun] = {}

    def ready() -> dict[str, Any]:
        try:
            _import_branch(finder)
        except BranchError as exc:
            return {"error": str(exc)}
        return {}

    def handle(request: dict[str, Any], ask: Ask, send: Send) -> dict[str, Any]:
        try:
            if request["op"] == "build":
                seed(model_infos)
                state["run"] = BranchRun(request)
                return state["run"].built()
            run = state["run"]
            return run.schedule(request) if request["op"] == "schedule" else run.update(request)
        except ConfigRejected as exc:
            return {"rejected": str(exc)}
        except CheckoutMismatch as exc:
            return {"unfit": str(exc)}
        except Exception as exc:  # noqa: BLE001 - what the branch raises is a fault of the run, reported there
            unfit = unfit_for_installed(exc)  # e.g. the branch's Scheduler built on the installed configs
            if unfit is not None:
                return {"unfit": unfit}
            return {"raised": [type(exc).__name__, str(exc)[:MAX_MESSAGE]]}

    serve(fd, ready, handle)


if __name__ == "__main__":
    main()
