"""The minimizer's scenario stages, in registration order; each offers one change at a time to ``Shrinker.consider``."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any

from fuzz.model.knobs import KNOBS
from fuzz.model.scenario import Request, Scenario, prompt_lengths
from fuzz.reduce.shrinker import Shrinker, Stage, StageFn

STAGES: list[Stage] = []


def stage(name: str) -> Callable[[StageFn], StageFn]:

    def register(fn: StageFn) -> StageFn:
        STAGES.append((name, fn))
        return fn

    return register


# ---------------------------------------------------------------- edits


def _with_requests(s: Scenario, requests: Iterable[Request]) -> Scenario:
    return replace(s, requests=tuple(requests))


def _with_request(s: Scenario, index: int, **changes: Any) -> Scenario:
    requests = list(s.requests)
    requests[index] = replace(requests[index], **changes)
    return _with_requests(s, requests)


def _with_part(s: Scenario, index: int, part: int, value: str | int) -> Scenario:
    prompt = list(s.requests[index].prompt)
    prompt[part] = value
    return _with_request(s, index, prompt=tuple(prompt))


def _keep_requests(s: Scenario, keep: Collection[str]) -> Scenario:
    """The requests in ``keep``, minus any whose parent conversation is dropped."""
    kept: list[Request] = []
    for r in s.requests:
        if r.id in keep and (r.continues is None or any(k.id == r.continues for k in kept)):
            kept.append(r)
    return _with_requests(s, kept)


def _segment_uses(s: Scenario) -> dict[str, int]:
    uses = dict.fromkeys(s.segments, 0)
    for r in s.requests:
        for p in r.prompt:
            if isinstance(p, str):
                uses[p] += 1
    return uses


def _scale(length: int, old: int, new: int) -> int:
    """``q * old + r`` as ``q * new + r'``: whole blocks kept, the remainder scaled (never to 0 or a full block)."""
    q, r = divmod(length, old)
    return q * new + (0 if r == 0 else min(max(round(r * new / old), 1), new - 1))


# ---------------------------------------------------------------- stages


@stage("drop-requests")
def drop_requests(sh: Shrinker) -> None:
    """Delta debugging (ddmin) over the request list; dropping a parent drops its continuations."""
    n = 2
    while len(items := [r.id for r in sh.current.requests]) >= 2:
        size = -(-len(items) // n)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        if any(sh.consider(_keep_requests(sh.current, chunk)) for chunk in chunks):
            n = 2
        elif any(sh.consider(_keep_requests(sh.current, [i for i in items if i not in chunk])) for chunk in chunks):
            n = max(n - 1, 2)
        elif n >= len(items):
            return
        else:
            n = min(2 * n, len(items))


@stage("fold-concurrent-prefill")
def fold_concurrent_prefill(sh: Shrinker) -> None:
    """Drop a request sharing the first step, its prompt taken off that step's budget (a concurrent-prefill bug)."""
    for r in sh.current.requests:
        s = sh.current
        e = s.engine
        first_budget = e.budget_at(0)
        length = prompt_lengths(s).get(r.id, 0)
        starts_together = sum(x.arrival_step == 0 for x in s.requests) > 1
        if r.arrival_step or r.continues or not starts_together or not 0 < length < first_budget:
            continue
        folded = s.with_engine(step_budgets=(first_budget - length, *e.step_budgets[1:]))
        sh.consider(_keep_requests(folded, [x.id for x in s.requests if x.id != r.id]))


def _clearing(name: str) -> StageFn:
    """A stage setting each request's optional ``name`` to None, one request at a time."""

    def clear(sh: Shrinker) -> None:
        for i in range(len(sh.current.requests)):
            if getattr(sh.current.requests[i], name) is not None:
                sh.consider(_with_request(sh.current, i, **{name: None}))

    return clear


stage("detach-continuations")(_clearing("continues"))


@stage("drop-prompt-parts")
def drop_prompt_parts(sh: Shrinker) -> None:
    for i in range(len(sh.current.requests)):
        part = len(sh.current.requests[i].prompt) - 1
        while part >= 0:
            prompt = sh.current.requests[i].prompt
            sh.consider(_with_request(sh.current, i, prompt=prompt[:part] + prompt[part + 1 :]))
            part -= 1


@stage("merge-segments")
def merge_segments(sh: Shrinker) -> None:
    """Drop unused segments, inline a segment used once as a tail, merge adjacent tails."""
    uses = _segment_uses(sh.current)
    unused = [name for name, n in uses.items() if n == 0]
    if unused:
        sh.consider(replace(sh.current, segments={k: v for k, v in sh.current.segments.items() if k not in unused}))
    for name in [name for name, n in _segment_uses(sh.current).items() if n == 1]:
        s = sh.current
        i, part = next((i, j) for i, r in enumerate(s.requests) for j, p in enumerate(r.prompt) if p == name)
        inlined = _with_part(s, i, part, s.segments[name])
        sh.consider(replace(inlined, segments={k: v for k, v in s.segments.items() if k != name}))
    for i in range(len(sh.current.requests)):
        part = 0
        while part + 1 < len(prompt := sh.current.requests[i].prompt):
            a, b = prompt[part], prompt[part + 1]
            if isinstance(a, int) and isinstance(b, int):
                merged = prompt[:part] + (a + b,) + prompt[part + 2 :]
                if sh.consider(_with_request(sh.current, i, prompt=merged)):
                    continue
            part += 1


@stage("shorten-lengths")
def shorten_lengths(sh: Shrinker) -> None:
    """Binary search on every segment and tail length, trying multiples of B and +-1 first."""
    block = sh.current.engine.mamba_block_size
    for name in list(sh.current.segments):
        sh.minimize_int(lambda s, n=name: s.segments[n],
                        lambda s, v, n=name: replace(s, segments={**s.segments, n: v}), 1, block)
    for i, r in enumerate(sh.current.requests):
        for j, p in enumerate(r.prompt):
            if isinstance(p, int):
                sh.minimize_int(lambda s, i=i, j=j: s.requests[i].prompt[j],
                                lambda s, v, i=i, j=j: _with_part(s, i, j, v), 1, block)


@stage("rescale-block")
def rescale_block(sh: Shrinker) -> None:
    """A smaller Mamba block, each token count keeping its block index and residue; budgets rescaled or kept."""
    e = sh.current.engine
    old = e.mamba_block_size
    options = {e.block_size * m for m in (1, 2, 4, 8, 16, 32, 64)} | {old // d // e.block_size * e.block_size
                                                                     for d in (2, 4, 8)}
    for new in sorted(b for b in options if e.block_size <= b < old):
        for scale_budgets in (True, False):
            if sh.consider(_rescaled(sh.current, new, scale_budgets)):
                return


def _rescaled(s: Scenario, new: int, scale_budgets: bool) -> Scenario:
    """``s`` at Mamba block ``new``: token counts ``_scale``d, each knob as its row's ``rescale`` says."""
    old = s.engine.mamba_block_size

    def scale(n: int) -> int:
        return _scale(n, old, new)

    def rescaled(kind: str, value: Any) -> Any:
        if value is None or kind == "budget" and not scale_budgets:
            return value
        if kind == "cap":
            return min(value, new)
        return tuple(map(scale, value)) if isinstance(value, tuple) else scale(value)

    engine = replace(s.engine, mamba_block_size=new, **{
        name: rescaled(row.rescale, getattr(s.engine, name)) for name, row in KNOBS.items() if row.rescale})
    requests = [replace(r, prompt=tuple(p if isinstance(p, str) else scale(p) for p in r.prompt),
                        external_tokens=scale(r.external_tokens)) for r in s.requests]
    return Scenario(engine=engine, segments={k: scale(v) for k, v in s.segments.items()},
                    requests=tuple(requests), seed=s.seed)


@stage("merge-arrivals")
def merge_arrivals(sh: Shrinker) -> None:
    for i in range(len(sh.current.requests)):
        if sh.current.requests[i].arrival_step == 0:
            continue
        others = sorted({r.arrival_step for r in sh.current.requests})
        if not any(sh.consider(_with_request(sh.current, i, arrival_step=a)) for a in others
                   if a < sh.current.requests[i].arrival_step):
            sh.minimize_int(lambda s, i=i: s.requests[i].arrival_step,
                            lambda s, v, i=i: _with_request(s, i, arrival_step=v), 0, 1 << 30)


@stage("lower-max-tokens")
def lower_max_tokens(sh: Shrinker) -> None:
    for i in range(len(sh.current.requests)):
        sh.minimize_int(lambda s, i=i: s.requests[i].max_tokens,
                        lambda s, v, i=i: _with_request(s, i, max_tokens=v), 1, 1 << 30)


stage("drop-aborts")(_clearing("abort_step"))


@stage("simplify-accept")
def simplify_accept(sh: Shrinker) -> None:
    """Empty (all accepted), then fewer entries, then entries lowered to 0."""
    for i in range(len(sh.current.requests)):
        if not sh.current.requests[i].accept or sh.consider(_with_request(sh.current, i, accept=())):
            continue
        j = len(sh.current.requests[i].accept) - 1
        while j >= 0:
            accept = sh.current.requests[i].accept
            if not sh.consider(_with_request(sh.current, i, accept=accept[:j] + accept[j + 1 :])) and accept[j]:
                sh.consider(_with_request(sh.current, i, accept=accept[:j] + (0,) + accept[j + 1 :]))
            j -= 1


@stage("simplify-engine")
def simplify_engine(sh: Shrinker) -> None:
    """Each engine knob as its row's ``Shrink`` says (simplest setting, else the fallback; a list emptied or cut),
    then KV-connector tokens off and token seed 0."""
    for name, row in KNOBS.items():
        if row.shrink.fixed:
            continue
        engine = sh.current.engine
        if row.kind == "ints":
            _shrink_list(sh, name)
            continue
        reset = row.shrink.reset(engine) if row.shrink.reset else {name: engine.default_of(name)}
        if all(getattr(engine, k) == v for k, v in reset.items()) or sh.consider(sh.current.with_engine(**reset)):
            continue
        fallback = row.shrink.fallback(engine) if row.shrink.fallback else {}
        if fallback:
            sh.consider(sh.current.with_engine(**fallback))
    for i in range(len(sh.current.requests)):
        if sh.current.requests[i].external_tokens:
            sh.consider(_with_request(sh.current, i, external_tokens=0))
    if sh.current.seed:
        sh.consider(replace(sh.current, seed=0))


def _shrink_list(sh: Shrinker, name: str) -> None:
    """A list knob: empty; else drop entries from the end while that reproduces, then each one left."""
    if not getattr(sh.current.engine, name) or sh.consider(sh.current.with_engine(**{name: ()})):
        return
    while getattr(sh.current.engine, name) and sh.consider(
            sh.current.with_engine(**{name: getattr(sh.current.engine, name)[:-1]})):
        pass
    j = len(getattr(sh.current.engine, name)) - 2
    while j >= 0:
        entries = getattr(sh.current.engine, name)
        sh.consider(sh.current.with_engine(**{name: entries[:j] + entries[j + 1:]}))
        j -= 1


@stage("shrink-numbers")
def shrink_numbers(sh: Shrinker) -> None:
    """Free numbers toward canonical values (a row's low end, block multiples, +-1): the knobs whose rows say
    ``minimize``, then KV-connector tokens."""
    block = sh.current.engine.mamba_block_size
    for name, row in KNOBS.items():
        if row.shrink.minimize is None:
            continue
        low, grid = row.shrink.minimize
        step = block if grid == "block" else 1 << 30
        value = getattr(sh.current.engine, name)
        if row.kind == "ints":
            for j in range(len(value)):
                sh.minimize_int(lambda s, n=name, j=j: getattr(s.engine, n)[j],
                                lambda s, v, n=name, j=j: s.with_engine(**{n: _replaced(getattr(s.engine, n), j, v)}),
                                low, step)
        elif value and not sh.current.engine.at_default(name):
            sh.minimize_int(lambda s, n=name: getattr(s.engine, n), lambda s, v, n=name: s.with_engine(**{n: v}),
                            low, step)
    for i in range(len(sh.current.requests)):
        if sh.current.requests[i].external_tokens:
            sh.minimize_int(lambda s, i=i: s.requests[i].external_tokens,
                            lambda s, v, i=i: _with_request(s, i, external_tokens=v), 1, block)


def _replaced(entries: tuple[int, ...], index: int, value: int) -> tuple[int, ...]:
    return (*entries[:index], value, *entries[index + 1:])
