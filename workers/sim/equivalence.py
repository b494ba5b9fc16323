"""Bounded exhaustive equivalence of two splits: every call of a stated grid, the answers compared.

The grid (:data:`CONFIG_GRID` x the request grid of :func:`_request_states`):

- engines: real Schedulers, built by vLLM from every combination of Mamba block ``B`` in {4, 8}, hash block
  ``h`` in {B, B/2, B/4 >= 2} (attention block ``h``), speculative decoding off / MTP 1, 2, 4 / EAGLE 1, 3 (with
  lookahead hashes on and off where vLLM has them), KV connector on/off, internal checkpoint alignment
  none / 1 / 4, shared-prefix junction stops on/off (where partial hits are on), and (budget, long-prefill
  threshold) in :data:`BUDGETS`, each relative to ``B``; configurations vLLM rejects are counted, not run.
  Engines equal in every scheduler attribute vLLM's own split reads are one *view* (run once).
- requests, per view: prompt ``P`` in 1..3B+1 with ``g`` in {0, 1, 2 + spec} tokens already generated;
  a first schedule (nothing computed) at every hash-aligned local hit below the tokens, every external hit
  (connector on) and every hash-aligned junction past the local hit; a later chunk at every computed count
  with no junction or a hash-aligned one; every chunk size from 1 to the budget's cap.

Invariant: :func:`compare` returns no difference exactly when both splits give the same answer (value, or
the type of what they raise) on every grid call; a difference is the first such call in grid order. It
refuses (``ValueError``) a split that reads request fields the grid does not vary."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

SplitFn = Callable[..., int]
REQUEST_FIELDS = ("num_computed_tokens", "num_prompt_tokens", "num_tokens", "num_output_tokens",
                  "shared_prefix_boundary")
SPECS = (("off", 0), ("mtp", 1), ("mtp", 2), ("mtp", 4), ("eagle", 1), ("eagle", 3))
ALIGNMENTS = (None, 1, 4)  # none, below, at and above the hash block
# (max_num_batched_tokens, long_prefill_token_threshold) as functions of B: around the block on each side.
BUDGETS: tuple[tuple[Callable[[int], int], Callable[[int], int]], ...] = (
    (lambda b: 2 * b + 2, lambda b: 0), (lambda b: b - 1, lambda b: 0), (lambda b: b, lambda b: 0),
    (lambda b: 2 * b + 2, lambda b: b - 1), (lambda b: 2 * b + 2, lambda b: b),
    (lambda b: b - 1, lambda b: b + 1), (lambda b: b + 1, lambda b: b - 1))


BLOCKS = ((4, 4), (4, 2), (8, 8), (8, 4))  # (Mamba block, hash block): without and with partial hits


def config_grid(lookahead_knob: bool) -> list[dict[str, Any]]:
    """Every engine of the grid as an ``engine`` object (``lookahead_knob``: vLLM has lookahead hashes)."""
    grid = []
    for (mamba, hash_block), (spec, drafts), connector, alignment, budget in itertools.product(
            BLOCKS, SPECS, (False, True), ALIGNMENTS, BUDGETS):
        for lookahead_off in (False, True) if lookahead_knob and spec != "off" else (False,):
            for shared in (False, True) if hash_block < mamba and spec != "off" else (False,):
                engine = {"mamba_block_size": mamba, "block_size": hash_block, "hash_block_size": hash_block,
                          "spec_decode": spec, "num_speculative_tokens": drafts,
                          "prefill_checkpoint_alignment": alignment, "shared_prefix_checkpoint": shared,
                          "max_num_batched_tokens": budget[0](mamba), "max_num_seqs": 1,
                          "long_prefill_token_threshold": budget[1](mamba)}
                if lookahead_off:
                    engine["disable_lookahead_block_hashes"] = True
                grid.append({"engine": engine, "kv_connector": connector})
    return grid


def reads(split: SplitFn) -> tuple[list[tuple[str, ...]], list[str]]:
    """The attribute chains a split's source reads of ``self`` (longest only) and the fields of ``request``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(split)))
    chains, inner = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                inner.add(id(value))
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in ("self", "request") and id(node) not in inner:
                chains.add((value.id, *reversed(parts)))
    return sorted(c[1:] for c in chains if c[0] == "self"), sorted(c[1] for c in chains if c[0] == "request")


@dataclass
class View:
    """One engine as the reference reads it: a real Scheduler, and what bounds its calls."""

    scheduler: Any
    engine: dict[str, Any]
    kv_connector: bool

    @property
    def cap(self) -> int:
        threshold = self.engine["long_prefill_token_threshold"]
        budget = self.engine["max_num_batched_tokens"]
        return min(budget, threshold) if threshold else budget


@dataclass(frozen=True)
class Grid:
    """The grid's views and the configurations vLLM rejected."""

    views: tuple[View, ...]
    configs: int
    rejected: int


def _value(obj: Any, chain: tuple[str, ...]) -> Any:
    for part in chain:
        obj = getattr(obj, part)
    return obj


@functools.cache
def grid() -> Grid:
    """The grid's distinct views (built once per process)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from fuzz.errors import ConfigRejected
    from fuzz.model.knobs import KNOBS, parse_engine
    from workers.sim.scheduler import build_scheduler

    self_chains, _ = reads(Scheduler.__dict__["_mamba_block_aligned_split"])
    lookahead = KNOBS["disable_lookahead_block_hashes"].needs.installed
    views: dict[tuple[Any, ...], View] = {}
    configs = config_grid(lookahead)
    rejected = 0
    for config in configs:
        try:
            engine = parse_engine(config["engine"], lambda field, message: ValueError(f"{field}: {message}"))
            scheduler = build_scheduler(engine, 256, config["kv_connector"])
        except (ValueError, ConfigRejected):
            rejected += 1
            continue
        key = tuple(_value(scheduler, chain) for chain in self_chains) + (
            config["engine"]["max_num_batched_tokens"], config["engine"]["long_prefill_token_threshold"],
            config["kv_connector"])
        views.setdefault(key, View(scheduler, config["engine"], config["kv_connector"]))
    return Grid(tuple(views.values()), len(configs), rejected)


class GridRequest:
    """The request fields a split may read (``REQUEST_FIELDS``), set in place for each call."""

    __slots__ = REQUEST_FIELDS

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in REQUEST_FIELDS}


def _request_states(view: View, request: GridRequest) -> Iterator[tuple[int, int, int]]:
    """Sets ``request`` for each call of ``view`` and yields (num_new_tokens, local, external)."""
    block = view.scheduler.cache_config.block_size
    hash_block = view.scheduler.hash_block_size
    cap = view.cap
    for prompt in range(1, 3 * block + 2):
        for generated in (0, 1, 2):
            tokens = prompt + generated
            request.num_prompt_tokens, request.num_tokens, request.num_output_tokens = prompt, tokens, generated
            request.num_computed_tokens = 0
            for local in range(0, tokens, hash_block):
                for external in range(tokens - local) if view.kv_connector else (0,):
                    for junction in (0, *range(local + hash_block, tokens, hash_block)):
                        request.shared_prefix_boundary = junction
                        for offered in range(1, min(cap, tokens - local - external) + 1):
                            yield offered, local, external
            for computed in range(1, tokens):
                request.num_computed_tokens = computed
                for junction in (0, *range(hash_block, tokens, hash_block)):
                    request.shared_prefix_boundary = junction
                    for offered in range(1, min(cap, tokens - computed) + 1):
                        yield offered, 0, 0


def answer(split: SplitFn, scheduler: Any, request: Any, args: tuple[int, ...]) -> int | str:
    """The split's answer to one call: its value, or ``raises <type>``."""
    try:
        return split(scheduler, request, *args)
    except Exception as exc:  # noqa: BLE001 - what a split raises is its answer
        return f"raises {type(exc).__name__}"


@functools.cache
def _reference_answers(reference: SplitFn) -> tuple[tuple[int | str, ...], ...]:
    request = GridRequest()
    return tuple(tuple(answer(reference, view.scheduler, request, args) for args in _request_states(view, request))
                 for view in grid().views)


@dataclass(frozen=True)
class Difference:
    """The first grid call where the two splits answer differently."""

    engine: dict[str, Any]
    kv_connector: bool
    request: dict[str, int]
    args: tuple[int, int, int]
    expected: int | str
    got: int | str

    def describe(self) -> str:
        engine = ", ".join(f"{k}={v}" for k, v in self.engine.items())
        return (f"{engine}{', kv connector' if self.kv_connector else ''}; request {self.request}; "
                f"split(num_new_tokens={self.args[0]}, local={self.args[1]}, external={self.args[2]}): "
                f"reference {self.expected}, candidate {self.got}")


@dataclass(frozen=True)
class Check:
    """What one comparison covered: calls made, views, configurations (and those vLLM rejected)."""

    calls: int
    views: int
    configs: int
    rejected: int
    seconds: float
    difference: Difference | None

    @property
    def equivalent(self) -> bool:
        return self.difference is None


def _request_fields(split: SplitFn) -> list[str]:
    try:
        return reads(split)[1]
    except (OSError, TypeError):  # no source (compiled at run time): a mutant reads what its original does
        return []


def compare(candidate: SplitFn, reference: SplitFn) -> Check:
    """``candidate`` against ``reference`` on every grid call, stopping at the first difference."""
    outside = sorted((set(_request_fields(reference)) | set(_request_fields(candidate))) - set(REQUEST_FIELDS))
    if outside:
        raise ValueError(f"the grid does not vary request.{', request.'.join(outside)}")
    started = time.perf_counter()
    views = grid()
    expected = _reference_answers(reference)
    calls, difference = _first_difference(candidate, views, expected)
    return Check(calls, len(views.views), views.configs, views.rejected, time.perf_counter() - started, difference)


def _first_difference(candidate: SplitFn, views: Grid, expected: tuple[tuple[int | str, ...], ...]
                      ) -> tuple[int, Difference | None]:
    request = GridRequest()
    calls = 0
    for view, answers in zip(views.views, expected, strict=True):
        for args, want in zip(_request_states(view, request), answers, strict=True):
            calls += 1
            got = answer(candidate, view.scheduler, request, args)
            if got != want:
                return calls, Difference(view.engine, view.kv_connector, request.as_dict(), args, want, got)
    return calls, None
