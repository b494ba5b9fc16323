"""The engine knobs: one table (a :class:`Knob` row per :class:`EngineKnobs` field) everything handling a knob reads.
Invariants: a row's rule, bounds, default and generator read only the knobs above it; generators and mutators give
values the parser accepts; ``omit_at_default`` knobs stay out of files at their default; a knob the installed vLLM
lacks (``needs``) is never drawn, mutated nor passed at its default, and setting it is ``unsupported`` everywhere."""

from __future__ import annotations

import ast
import functools
import importlib.util
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from fuzz.errors import InputError
from fuzz.model.draws import (
    CHECKPOINT_ALIGNMENTS,
    MAMBA_BLOCK_SIZES,
    MAX_NUM_SEQS,
    Choices,
    at_block,
    fragmenting_budget,
    tight_kv_blocks,
)

SPEC_METHODS = ("off", "eagle", "mtp")
MAX_BUDGET = 1 << 20
PHASES = ("engine", "family", "pool")  # generation: before the requests, after them, after the connector

Values = Mapping[str, Any]  # knob name -> value, the knobs parsed or drawn so far
Fail = Callable[[str, str], InputError]  # (knob, message) -> the caller's error naming its file and field


@dataclass(frozen=True)
class Facts:
    """What a generator or mutator may read beyond the knobs: facts of the scenario's requests."""

    required_kv_blocks: int = 0  # the blocks its largest request needs alone (0 before requests exist)


@dataclass(frozen=True)
class Shrink:
    """How the minimiser simplifies a knob: ``reset`` (None: default) unless ``fixed``, ``fallback``, ``minimize``."""

    reset: Callable[[EngineKnobs], dict[str, Any]] | None = None
    fixed: bool = False
    fallback: Callable[[EngineKnobs], dict[str, Any]] | None = None
    minimize: tuple[int, str] | None = None


@dataclass(frozen=True)
class VllmArg:
    """What a knob becomes in vLLM: ``args(knobs)``, by ``where`` (``engine``, ``scheduler`` or ``pool``)."""

    where: str
    args: Callable[[EngineKnobs], dict[str, Any]]


@dataclass(frozen=True)
class Needs:
    """A vLLM feature a knob reaches: what it is, the release that brought it, and a probe of the installed vLLM."""

    what: str
    since: str
    probe: Callable[[], bool]

    @functools.cached_property
    def installed(self) -> bool:
        return self.probe()


def _vllm_class(relative: str, name: str) -> ast.ClassDef | None:
    """Class ``name`` of the installed vLLM's ``relative`` file, parsed, never imported (None where absent)."""
    spec = importlib.util.find_spec("vllm")  # a top-level package: located, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _speculative_field(name: str) -> Callable[[], bool]:
    def probe() -> bool:
        cls = _vllm_class("config/speculative.py", "SpeculativeConfig")
        return cls is not None and any(isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                                       and n.target.id == name for n in cls.body)

    return probe


def _scheduler_sets(attribute: str) -> Callable[[], bool]:
    def probe() -> bool:
        cls = _vllm_class("v1/core/sched/scheduler.py", "Scheduler")
        init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None) \
            if cls is not None else None
        return init is not None and any(isinstance(n, ast.Attribute) and n.attr == attribute
                                        for n in ast.walk(init))

    return probe


LOOKAHEAD_HASHES = Needs("lookahead block hashes (speculative_config.disable_lookahead_block_hashes)", "0.33.0",
                         _speculative_field("disable_lookahead_block_hashes"))
LOCAL_PREFILL_CADENCE = Needs("prefill_schedule_interval applied by the scheduler without data parallelism",
                              "0.33.0", _scheduler_sets("local_prefill_interval"))


@dataclass(frozen=True)
class Knob:
    """One row of the knob table."""

    doc: str
    kind: str  # int | bool | choice | ints (a list of ints)
    lo: int | Callable[[Values], int] = 0
    hi: int | Callable[[Values], int] = 0
    choices: tuple[str, ...] = ()
    nullable: bool = False  # JSON null is a value of its own
    derived_default: Callable[[Values], Any] | None = None  # a default that depends on the knobs above
    rule: Callable[[Values], tuple[str, str] | None] | None = None  # (knob at fault, message) when broken
    omit_at_default: bool = False
    phase: str | None = None  # when the generator draws it (PHASES); None: never drawn
    generate: Callable[[Choices, Values, Facts], Any] | None = None
    mutate: Callable[[EngineKnobs, random.Random, Facts], dict[str, Any]] | None = None
    shrink: Shrink = field(default_factory=Shrink)
    rescale: str | None = None  # a smaller B: "budget" (optional), "tokens" (scaled), "cap" (at most B)
    free_number: bool = True  # its size counts in "simpler" (``fuzz.reduce.simplicity``)
    vllm: VllmArg | None = None
    needs: Needs | None = None  # the vLLM feature it reaches, where older vLLMs lack it

    @property
    def available(self) -> bool:
        """Whether the installed vLLM reads this knob (always, for a knob that needs no feature)."""
        return self.needs is None or self.needs.installed


def knob(default: Any, **row: Any) -> Any:
    """A field of :class:`EngineKnobs` with its row."""
    return field(default=default, metadata={"knob": Knob(**row)})


def _block(v: Values) -> int:
    return v["mamba_block_size"]


def _speculative(e: EngineKnobs) -> dict[str, Any]:
    # vLLM has no EAGLE draft architecture for the tiny Qwen3-Next model; its MTP head is configured
    # instead. The scheduler treats both as the EAGLE family (use_eagle, use_eagle_block_drop).
    if e.spec_decode == "off":
        return {"speculative_config": None}
    extra = {"disable_lookahead_block_hashes": True} if e.disable_lookahead_block_hashes else {}
    return {"speculative_config": {"method": "mtp", "num_speculative_tokens": e.num_speculative_tokens, **extra}}


def _needs_spec(name: str) -> Callable[[Values], tuple[str, str] | None]:
    def rule(v: Values) -> tuple[str, str] | None:
        return (name, "needs spec_decode (it is a speculative_config field)") if v[name] and v["spec_decode"] == "off" \
            else None

    return rule


def _toggle_lookahead(e: EngineKnobs, rng: random.Random, f: Facts) -> dict[str, Any]:
    if e.disable_lookahead_block_hashes:
        return {"disable_lookahead_block_hashes": False}
    spec = e.spec_decode if e.spec_decode != "off" else rng.choice(("mtp", "eagle"))
    return {"disable_lookahead_block_hashes": True, "spec_decode": spec,
            "num_speculative_tokens": e.num_speculative_tokens or rng.randint(1, 4)}


def _divides(v: Values) -> tuple[str, str] | None:
    if v["mamba_block_size"] % v["hash_block_size"] or v["block_size"] % v["hash_block_size"]:
        return ("hash_block_size", f"{v['hash_block_size']} must divide block_size {v['block_size']} and "
                                   f"mamba_block_size {v['mamba_block_size']}")
    return None


def _spec_count(v: Values) -> tuple[str, str] | None:
    if v["spec_decode"] != "off" and v["num_speculative_tokens"] == 0:
        return ("num_speculative_tokens", f"spec_decode {v['spec_decode']!r} needs at least 1")
    if v["spec_decode"] == "off" and v["num_speculative_tokens"]:
        return ("num_speculative_tokens", "must be 0 when spec_decode is 'off'")
    return None


def _padded_budget(c: Choices, v: Values) -> int:
    """A budget that fragments a block, with room for a decode's drafts."""
    return fragmenting_budget(c, _block(v)) + (1 + v["num_speculative_tokens"]) * 8


def _budgets_within(v: Values) -> tuple[str, str] | None:
    """A step's budget is at most ``max_num_batched_tokens`` (vLLM caps every step there)."""
    over = [b for b in v["step_budgets"] if b > v["max_num_batched_tokens"]]
    if over:
        return ("step_budgets", f"{over[0]} exceeds max_num_batched_tokens {v['max_num_batched_tokens']}: vLLM "
                                "caps every step there")
    return None


def _new_block_size(e: EngineKnobs, rng: random.Random, f: Facts) -> dict[str, Any]:
    block = rng.choice(MAMBA_BLOCK_SIZES)
    attention = rng.choice((16, block))
    alignment = e.prefill_checkpoint_alignment  # an alignment of the old block may exceed the new one
    return {"mamba_block_size": block, "block_size": attention, "hash_block_size": rng.choice((16, attention)),
            "prefill_checkpoint_alignment": None if alignment is None else min(alignment, block)}


def _new_spec(e: EngineKnobs, rng: random.Random, f: Facts) -> dict[str, Any]:
    method = rng.choice(("off", "mtp", "eagle"))
    return {"spec_decode": method, "num_speculative_tokens": 0 if method == "off" else rng.randint(1, 4)}


def _toggle_shared(e: EngineKnobs, rng: random.Random, f: Facts) -> dict[str, Any]:
    if e.shared_prefix_checkpoint:
        return {"shared_prefix_checkpoint": False}
    spec = e.spec_decode if e.spec_decode != "off" else rng.choice(("mtp", "eagle"))
    return {"shared_prefix_checkpoint": True, "hash_block_size": 16, "spec_decode": spec,
            "num_speculative_tokens": e.num_speculative_tokens or rng.randint(1, 4)}


@dataclass(frozen=True)
class EngineKnobs:
    """Engine configuration of one scenario (the ``engine`` key), a knob-table row per field; partial hash hits are
    on exactly when ``hash_block_size < mamba_block_size``."""

    mamba_block_size: int = knob(
        1600, doc="B: the Mamba group's block; one state snapshot per B tokens", kind="int", lo=1, hi=16384,
        phase="engine", generate=lambda c, v, f: c.choice(MAMBA_BLOCK_SIZES), mutate=_new_block_size,
        shrink=Shrink(fixed=True),  # the rescale-block stage moves it, every token count with it
        vllm=VllmArg("engine", lambda e: {"mamba_block_size": e.mamba_block_size, "block_size": e.mamba_block_size}))
    block_size: int = knob(
        16, doc="the full-attention group's block; divides B", kind="int", lo=1, hi=16384,
        rule=lambda v: None if v["mamba_block_size"] % v["block_size"] == 0 else (
            "mamba_block_size", f"{v['mamba_block_size']} is not a multiple of block_size {v['block_size']}"),
        phase="engine", generate=lambda c, v, f: c.choice((16, 16, _block(v))))
    hash_block_size: int = knob(
        16, doc="vLLM's prefix_match_unit: below B, partial hash hits", kind="int", lo=1, hi=16384,
        derived_default=lambda v: v["block_size"], rule=_divides,
        phase="engine", generate=lambda c, v, f: c.choice((16, v["block_size"])),
        mutate=lambda e, rng, f: {"hash_block_size": e.block_size if e.partial_hash_hits else 16},
        shrink=Shrink(reset=lambda e: {"hash_block_size": e.block_size}),
        vllm=VllmArg("engine", lambda e: {"prefix_match_unit": e.hash_block_size}))
    spec_decode: str = knob(
        "off", doc="speculative decoding: off, eagle or mtp (the EAGLE family)", kind="choice", choices=SPEC_METHODS,
        phase="engine", generate=lambda c, v, f: c.choice(("off", "off", "mtp", "eagle")), mutate=_new_spec,
        shrink=Shrink(reset=lambda e: {"spec_decode": "off", "num_speculative_tokens": 0},
                      fallback=lambda e: {"spec_decode": "mtp"} if e.spec_decode == "eagle" else {}),
        free_number=False, vllm=VllmArg("engine", _speculative))
    num_speculative_tokens: int = knob(
        0, doc="draft tokens per step (0 exactly when spec_decode is off)", kind="int", lo=0, hi=8,
        derived_default=lambda v: 0 if v["spec_decode"] == "off" else 1, rule=_spec_count,
        phase="engine", generate=lambda c, v, f: 0 if v["spec_decode"] == "off" else c.randint(1, 4),
        shrink=Shrink(fixed=True, minimize=(1, "none")), free_number=False)
    disable_lookahead_block_hashes: bool = knob(
        False, doc="speculative_config.disable_lookahead_block_hashes (vLLM 0.33+): an EAGLE-family drafter's "
        "hashes without the tokens it reads past each block, so the scheduler drops the trailing block again",
        kind="bool", omit_at_default=True, rule=_needs_spec("disable_lookahead_block_hashes"), needs=LOOKAHEAD_HASHES,
        phase="engine", generate=lambda c, v, f: v["spec_decode"] != "off" and c.random() < 0.5,
        mutate=_toggle_lookahead)  # vLLM's argument: part of spec_decode's speculative_config
    step_budgets: tuple[int, ...] = knob(
        (), doc="hand-picked token budgets of the first steps (each within max_num_batched_tokens)", kind="ints",
        lo=1, hi=MAX_BUDGET, phase="engine",
        generate=lambda c, v, f: tuple(fragmenting_budget(c, _block(v)) for _ in range(c.randint(1, 4)))
        if c.random() < 0.35 else (),
        mutate=lambda e, rng, f: {"step_budgets": tuple(min(fragmenting_budget(rng, e.mamba_block_size),
                                                            e.max_num_batched_tokens)
                                                        for _ in range(rng.randint(0, 4)))},
        shrink=Shrink(minimize=(1, "block")), rescale="budget", free_number=False)
    max_num_batched_tokens: int = knob(
        2048, doc="the token budget of every step past step_budgets, and the most of any step", kind="int", lo=1,
        hi=MAX_BUDGET, rule=_budgets_within, phase="engine",
        generate=lambda c, v, f: max((_padded_budget(c, v), *v["step_budgets"])),
        mutate=lambda e, rng, f: {"max_num_batched_tokens": max((
            at_block(rng, e.mamba_block_size) if rng.random() < 0.25 else _padded_budget(rng, vars(e)),
            *e.step_budgets))},
        shrink=Shrink(minimize=(1, "block")), rescale="budget",
        vllm=VllmArg("scheduler", lambda e: {"max_num_batched_tokens": e.max_num_batched_tokens}))
    long_prefill_token_threshold: int = knob(
        0, doc="the most tokens of one prefill chunk when several requests are eligible (0: none)",
        kind="int", lo=0, hi=MAX_BUDGET,
        phase="engine", generate=lambda c, v, f: c.choice((0, 0, 0, c.randint(16, 2 * _block(v)))),
        mutate=lambda e, rng, f: {"long_prefill_token_threshold":
                                  rng.choice((0, rng.randint(16, 2 * e.mamba_block_size),
                                              at_block(rng, e.mamba_block_size)))},
        shrink=Shrink(minimize=(1, "block")), rescale="budget",
        vllm=VllmArg("scheduler", lambda e: {"long_prefill_token_threshold": e.long_prefill_token_threshold}))
    max_num_seqs: int = knob(
        16, doc="the most requests running at once", kind="int", lo=1, hi=256,
        phase="engine", generate=lambda c, v, f: c.choice(MAX_NUM_SEQS),
        mutate=lambda e, rng, f: {"max_num_seqs": rng.choice((1, 2, 4, 16))},
        shrink=Shrink(minimize=(1, "none")),
        vllm=VllmArg("scheduler", lambda e: {"max_num_seqs": e.max_num_seqs}))
    prefill_schedule_interval: int = knob(
        1, doc="prefill_schedule_interval (applied without data parallelism from vLLM 0.33): prefill only once "
        "every N steps that schedule, the steps between decode alone", kind="int", lo=1, hi=64, omit_at_default=True,
        needs=LOCAL_PREFILL_CADENCE, phase="engine", generate=lambda c, v, f: c.choice((1, 1, 1, 2, 3, 4)),
        mutate=lambda e, rng, f: {"prefill_schedule_interval": rng.choice((1, 2, 3, 4, 8))},
        shrink=Shrink(minimize=(1, "none")),
        vllm=VllmArg("scheduler", lambda e: {"prefill_schedule_interval": e.prefill_schedule_interval}
                     if e.prefill_schedule_interval != 1 else {}))
    retention_interval: int | None = knob(
        0, doc="prefix_cache_retention_interval: null dense, 0 semantic checkpoints only, k one per k tokens",
        kind="int", lo=0, hi=MAX_BUDGET, nullable=True,
        phase="engine", generate=lambda c, v, f: c.choice((None, None, 0, _block(v), 2 * _block(v))),
        mutate=lambda e, rng, f: {"retention_interval": rng.choice((None, 0, e.mamba_block_size,
                                                                    2 * e.mamba_block_size))},
        shrink=Shrink(minimize=(1, "block")), rescale="tokens",
        vllm=VllmArg("engine", lambda e: {"prefix_cache_retention_interval": e.retention_interval}))
    prefill_checkpoint_alignment: int | None = knob(
        None, doc="null: GDN; k: a Mamba2/KDA spec with an internal prefill checkpoint at that alignment",
        kind="int", lo=1, hi=_block, nullable=True, omit_at_default=True,
        phase="family", generate=lambda c, v, f: c.choice(CHECKPOINT_ALIGNMENTS) if c.random() < 0.3 else None,
        mutate=lambda e, rng, f: {"prefill_checkpoint_alignment": None if e.prefill_checkpoint_alignment
                                  and rng.random() < 0.4 else rng.choice((*CHECKPOINT_ALIGNMENTS,
                                                                          e.mamba_block_size))},
        shrink=Shrink(minimize=(1, "block")), rescale="cap")
    shared_prefix_checkpoint: bool = knob(
        False, doc="enable_mamba_shared_prefix_checkpoint: junction stops where a sibling diverges",
        kind="bool", omit_at_default=True, phase="family",
        generate=lambda c, v, f: v["hash_block_size"] < v["mamba_block_size"] and v["spec_decode"] != "off"
        and c.random() < 0.5,
        mutate=_toggle_shared,
        vllm=VllmArg("engine", lambda e: {"enable_mamba_shared_prefix_checkpoint": e.shared_prefix_checkpoint}))
    num_kv_blocks: int | None = knob(
        None, doc="the KV pool's blocks (null: nothing is evicted; small: preemption)", kind="int", lo=4,
        hi=MAX_BUDGET, nullable=True, phase="pool",
        generate=lambda c, v, f: tight_kv_blocks(f.required_kv_blocks, c.random()) if c.random() < 0.15 else None,
        mutate=lambda e, rng, f: {"num_kv_blocks": None if e.num_kv_blocks and rng.random() < 0.3
                                  else tight_kv_blocks(f.required_kv_blocks, rng.random())},
        shrink=Shrink(minimize=(4, "none")),
        vllm=VllmArg("pool", lambda e: {"num_gpu_blocks_override": e.num_kv_blocks}))

    @property
    def partial_hash_hits(self) -> bool:
        return self.hash_block_size < self.mamba_block_size

    @property
    def num_spec_tokens(self) -> int:
        return 0 if self.spec_decode == "off" else self.num_speculative_tokens

    def budget_at(self, step: int) -> int:
        return self.step_budgets[step] if step < len(self.step_budgets) else self.max_num_batched_tokens

    def default_of(self, name: str) -> Any:
        """Knob ``name``'s default given the other knobs, as when parsed."""
        row = KNOBS[name]
        return row.derived_default(vars(self)) if row.derived_default else DEFAULTS[name]

    def at_default(self, name: str) -> bool:
        return getattr(self, name) == self.default_of(name)


KNOBS: dict[str, Knob] = {f.name: f.metadata["knob"] for f in fields(EngineKnobs)}
DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(EngineKnobs)}


# ---------------------------------------------------------------- parsing


def _bound(bound: int | Callable[[Values], int], values: Values) -> int:
    return bound(values) if callable(bound) else bound


def _parse_value(name: str, row: Knob, data: Mapping[str, Any], values: Values, fail: Fail) -> Any:
    default = row.derived_default(values) if row.derived_default else DEFAULTS[name]
    value = data.get(name, default)
    if value is None and row.nullable:
        return None
    lo, hi = _bound(row.lo, values), _bound(row.hi, values)
    if row.kind == "bool":
        if not isinstance(value, bool):
            raise fail(name, f"expected true or false, got {value!r}")
    elif row.kind == "choice":
        if value not in row.choices:
            raise fail(name, f"{value!r} is not one of {', '.join(row.choices)}")
    elif row.kind == "ints":
        if not isinstance(value, (list, tuple)) or any(
                isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi for x in value):
            raise fail(name, f"expected a list of integers in [{lo}, {hi}]")
        value = tuple(value)
    else:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(name, f"expected an integer, got {value!r}")
        if not lo <= value <= hi:
            raise fail(name, f"{value} is outside [{lo}, {hi}]")
    return value


def parse_engine(data: Mapping[str, Any], fail: Fail) -> EngineKnobs:
    """An ``engine`` object's knobs, checked row by row in table order; a fault raises ``fail(knob, message)``."""
    for key in data:
        if key not in KNOBS:
            raise fail(key, "unknown field")
    values: dict[str, Any] = {}
    for name, row in KNOBS.items():
        values[name] = _parse_value(name, row, data, values, fail)
        broken = row.rule(values) if row.rule else None
        if broken:
            raise fail(*broken)
    return EngineKnobs(**values)


def engine_json_schema() -> dict[str, Any]:
    """The JSON Schema of an ``engine`` object (types, static bounds, defaults; rules stay :func:`parse_engine`'s)."""
    properties: dict[str, Any] = {}
    for name, row in KNOBS.items():
        integer = {"type": "integer", **{key: bound for key, bound in (("minimum", row.lo), ("maximum", row.hi))
                                         if not callable(bound)}}
        kind = {"bool": {"type": "boolean"}, "choice": {"enum": list(row.choices)}, "int": integer,
                "ints": {"type": "array", "items": integer}}[row.kind]
        default = DEFAULTS[name]
        properties[name] = {"description": row.doc, **({"anyOf": [kind, {"type": "null"}]} if row.nullable else kind),
                            "default": list(default) if isinstance(default, tuple) else default}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def engine_to_dict(e: EngineKnobs) -> dict[str, Any]:
    """The ``engine`` object of a file: every knob, less those left out at their default."""
    return {name: list(value) if isinstance(value, tuple) else value
            for name, value in vars(e).items()
            if not (KNOBS[name].omit_at_default and value == DEFAULTS[name])}


# ---------------------------------------------------------------- generation and mutation


def draw_knobs(c: Choices, phase: str, values: Mapping[str, Any], facts: Facts = Facts()) -> dict[str, Any]:
    """``values`` with ``phase``'s knobs drawn in table order (no draw for a knob the installed vLLM lacks)."""
    drawn = {**DEFAULTS, **values}
    for name, row in KNOBS.items():
        if row.phase == phase and row.generate is not None and row.available:
            drawn[name] = row.generate(c, drawn, facts)
    return drawn


def knob_mutations() -> dict[str, Callable[[EngineKnobs, random.Random, Facts], dict[str, Any]]]:
    """``knob-<name>``: each row's mutation, as engine changes (a knob the installed vLLM lacks has none)."""
    return {f"knob-{name}": row.mutate for name, row in KNOBS.items() if row.mutate is not None and row.available}


def first_release(e: EngineKnobs) -> str | None:
    """The first vLLM release that reads every knob these knobs set (None: any vLLM does)."""
    from fuzz.model.vllm_build import release

    needed = [row.needs.since for name, row in KNOBS.items() if row.needs is not None and not e.at_default(name)]
    return max(needed, key=release, default=None)


def unsupported_reason(e: EngineKnobs) -> str | None:
    """Why the installed vLLM cannot run these knobs (a set knob needs what it lacks), else None."""
    from fuzz.model.vllm_build import installed_vllm

    for name, row in KNOBS.items():
        if not row.available and not e.at_default(name):
            assert row.needs is not None
            return (f"engine.{name} needs {row.needs.what}, which vLLM {installed_vllm().version} lacks "
                    f"(from vLLM {row.needs.since})")
    return None


# ---------------------------------------------------------------- what vLLM is given


def engine_args(e: EngineKnobs, where: tuple[str, ...] = ("engine",)) -> dict[str, Any]:
    """The vLLM arguments the knobs become, of the kinds ``where`` names (``VllmArg``), in table order."""
    args: dict[str, Any] = {}
    for row in KNOBS.values():
        if row.vllm is not None and row.vllm.where in where:
            args.update(row.vllm.args(e))
    return args


def scheduler_settings(e: EngineKnobs) -> dict[str, Any]:
    """The ``SchedulerConfig`` fields a run sets on its scheduler (per-step budgets aside: ``budget_at``)."""
    return engine_args(e, ("scheduler",))
