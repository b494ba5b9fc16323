"""Every first-order mutant of the installed vLLM's split, made by the standard operators of mutation testing.

The source of ``Scheduler._mamba_block_aligned_split`` as the installed vLLM ships it is parsed, and each
operator below is applied at each place it fits, one place per mutant (first order):

- ``ror``: relational operator replacement, each comparison operator by each of the other five;
- ``plus1`` / ``minus1``: ``e + 1`` / ``e - 1`` for each value expression ``e``; a benchmark keeps those on
  integer expressions only (an expression whose value was an ``int``, never a ``bool``, on every call of a
  sample: :func:`integer_sites`), constants included, so a name does not depend on the sample;
- ``negate``: ``not c`` for each condition (an ``if`` or conditional-expression test, a filter of a
  comprehension, an operand of ``and``/``or``);
- ``drop-operand``: each operand of ``and``/``or`` removed (a chained comparison counts as the ``and`` of
  its links);
- ``drop-stop``: each entry of the ``stops`` tuple removed;
- ``min-max``: ``min`` and ``max`` swapped;
- ``swap-args``: two arguments of one call swapped (positional or keyword values; not of ``min``/``max``,
  where the order does not matter);
- ``return``: each ``return`` made to return ``0`` (defer) or ``num_new_tokens`` (all that is offered).

A mutant's source is the installed source with exactly the mutated expression's text replaced (comments
and layout kept, so its diff is one line or a few), compiled against the scheduler module's own globals:
nothing global is patched. Names are stable for one vLLM source: ``<operator>_L<line>_<n>``, the line
counted in ``scheduler.py`` and ``n`` the mutant's index among that operator's mutants on that line.

Use one as a candidate with ``bench/mutants/generated.py:<name>`` (``gdnfuzz mutants`` style listing:
``python bench/mutants/generated.py``); ``bench/split_mutants.py`` runs the whole benchmark.
"""

# No ``from __future__ import annotations``: a policy file is run without being registered as a module by
# older gdnfuzz versions, and a dataclass with string annotations looks its module up (the benchmark runs
# this file under the checkout measured before as well).
import ast
import copy
import difflib
import functools
import inspect
import textwrap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

SplitFn = Callable[..., int]
RELATIONAL = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
SYMMETRIC_CALLS = ("min", "max")
PROBE = "__gdnfuzz_site__"


@dataclass(frozen=True)
class Mutant:
    """One first-order mutant: the operator, where (``line`` in ``scheduler.py``), the text before and after,
    and its source (the whole mutated split)."""

    name: str
    operator: str
    line: int
    before: str
    after: str
    source: str = field(repr=False)
    original: str = field(repr=False)
    site: int | None = None  # plus1 / minus1: the index of the expression among _value_sites

    @property
    def diff(self) -> str:
        """A unified diff of the split, original to mutant, with ``scheduler.py``'s line numbers."""
        padding = ["\n"] * (installed().first_line - 1)
        return "".join(difflib.unified_diff(
            padding + self.original.splitlines(keepends=True), padding + self.source.splitlines(keepends=True),
            "scheduler.py", f"scheduler.py ({self.name})", n=1))

    @functools.cached_property
    def split(self) -> SplitFn:
        return _compile(self.source, self.name)


@dataclass(frozen=True)
class _Installed:
    source: str  # the method's source, dedented
    first_line: int  # its first line in scheduler.py
    tree: ast.FunctionDef
    file: str


@functools.cache
def installed() -> _Installed:
    """The installed split's source and syntax tree."""
    method = installed_split()
    lines, first_line = inspect.getsourcelines(method)
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source).body[0]
    assert isinstance(tree, ast.FunctionDef)
    return _Installed(source, first_line, tree, inspect.getsourcefile(method) or "scheduler.py")


def installed_split() -> SplitFn:
    """The installed split itself (what every mutant is compared with)."""
    import vllm.v1.core.sched.scheduler as scheduler_module

    return scheduler_module.Scheduler.__dict__["_mamba_block_aligned_split"]


def _compile(source: str, name: str) -> SplitFn:
    import vllm.v1.core.sched.scheduler as scheduler_module

    namespace = dict(vars(scheduler_module))
    exec(compile(source, f"<generated mutant {name}>", "exec"), namespace)
    return namespace["_mamba_block_aligned_split"]


# ---------------------------------------------------------------- sites


def _value_sites(tree: ast.FunctionDef) -> list[ast.expr]:
    """Every expression that computes a value (loads, constants, operations, calls), in source order:
    the places an integer mutation may apply: in the body only (not annotations), not the name of a
    called function, not the object an attribute is read from (a chain's whole value is the site), not
    the docstring."""
    found = []
    skip: set[int] = set()
    for node in (n for statement in tree.body for n in ast.walk(statement)):
        if isinstance(node, ast.Call):
            skip.add(id(node.func))
        if isinstance(node, ast.Attribute):
            skip.add(id(node.value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skip.add(id(node.value))
        if id(node) in skip or not isinstance(node, ast.expr):
            continue
        if isinstance(node, ast.Name | ast.Attribute | ast.Subscript) and not isinstance(node.ctx, ast.Load):
            continue
        if isinstance(node, ast.Tuple | ast.GeneratorExp | ast.Starred | ast.Lambda | ast.keyword):
            continue
        found.append(node)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset, -(n.end_col_offset or 0)))


class _Probed(ast.NodeTransformer):
    """Wraps each site in ``__gdnfuzz_site__(index, expression)``, which records the value's type."""

    def __init__(self, sites: list[ast.expr]):
        self.index = {id(node): i for i, node in enumerate(sites)}

    def visit(self, node: ast.AST) -> ast.AST:
        index = self.index.get(id(node))
        node = self.generic_visit(node)
        if index is None:
            return node
        return ast.Call(ast.Name(PROBE, ast.Load()), [ast.Constant(index), node], [])


def integer_sites(calls: Iterable[tuple[Any, Any, tuple[int, int, int]]]) -> set[int]:
    """The indexes (into :func:`_value_sites`) of the expressions whose value is an ``int`` (not a ``bool``)
    every time one of ``calls`` (``(scheduler, request, args)``, e.g. recorded snapshots) evaluates them.
    An expression never evaluated there counts as an integer when it is an integer constant or an
    arithmetic operation, so a branch the sample misses still gets its arithmetic mutants."""
    import vllm.v1.core.sched.scheduler as scheduler_module

    tree = copy.deepcopy(installed().tree)
    sites = _value_sites(tree)
    seen: dict[int, set[type]] = {}

    def probe(index: int, value: Any) -> Any:
        seen.setdefault(index, set()).add(type(value))
        return value

    probed = ast.fix_missing_locations(_Probed(sites).visit(tree))
    namespace = {**vars(scheduler_module), PROBE: probe}
    exec(compile(ast.Module([probed], []), "<probed split>", "exec"), namespace)
    split = namespace["_mamba_block_aligned_split"]
    for scheduler, request, args in calls:
        split(scheduler, request, *args)
    arithmetic = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
    unseen_integers = {
        i for i, node in enumerate(sites) if i not in seen and (
            (isinstance(node, ast.Constant) and type(node.value) is int)
            or (isinstance(node, ast.BinOp) and isinstance(node.op, arithmetic)))}
    return {i for i, types in seen.items() if types == {int}} | unseen_integers


# ---------------------------------------------------------------- operators


def _segment(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node)
    assert text is not None
    return text


def _replace(source: str, node: ast.AST, text: str) -> str:
    """``source`` with ``node``'s text replaced by ``text`` (a multi-line node keeps its first line's
    indentation for what follows)."""
    lines = source.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: node.lineno - 1]) + _byte_col(lines[node.lineno - 1], node.col_offset)
    end_line = node.end_lineno or node.lineno
    end = sum(len(line) for line in lines[: end_line - 1]) + _byte_col(lines[end_line - 1], node.end_col_offset or 0)
    return source[:start] + text + source[end:]


def _byte_col(line: str, offset: int) -> int:
    """ast's column offsets count UTF-8 bytes: the character index they point at."""
    return len(line.encode()[:offset].decode())


Edit = tuple[str, ast.AST, str, int | None]  # (operator, node whose text is replaced, its new text, site)


def _ror(source: str, node: ast.Compare) -> Iterator[Edit]:
    for k, op in enumerate(node.ops):
        if not isinstance(op, RELATIONAL):
            continue
        for other in RELATIONAL:
            if isinstance(op, other):
                continue
            mutated = copy.deepcopy(node)
            mutated.ops[k] = other()
            yield "ror", node, ast.unparse(mutated), None


def _conditions(tree: ast.FunctionDef) -> list[ast.expr]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            found.append(node.test)
        elif isinstance(node, ast.comprehension):
            found.extend(node.ifs)
        elif isinstance(node, ast.BoolOp):
            found.extend(node.values)
    return found


def _drop_operands(node: ast.BoolOp | ast.Compare) -> Iterator[Edit]:
    if isinstance(node, ast.BoolOp):
        for k in range(len(node.values)):
            rest = node.values[:k] + node.values[k + 1:]
            kept = rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
            yield "drop-operand", node, f"({ast.unparse(kept)})", None
    elif len(node.ops) > 1:  # a < b < c is (a < b) and (b < c)
        links = [ast.Compare(left, [op], [right]) for left, op, right in
                 zip([node.left, *node.comparators[:-1]], node.ops, node.comparators, strict=True)]
        for k in range(len(links)):
            rest = links[:k] + links[k + 1:]
            yield "drop-operand", node, ast.unparse(rest[0] if len(rest) == 1 else ast.BoolOp(ast.And(), rest)), None


def _drop_stops(tree: ast.FunctionDef) -> Iterator[Edit]:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
                and any(isinstance(t, ast.Name) and t.id == "stops" for t in node.targets)):
            for element in node.value.elts:
                yield "drop-stop", element, "0", None  # an entry of 0 is never strictly inside a chunk: removed


def _min_max(node: ast.Call) -> Iterator[Edit]:
    if isinstance(node.func, ast.Name) and node.func.id in SYMMETRIC_CALLS:
        swapped = "max" if node.func.id == "min" else "min"
        yield "min-max", node.func, swapped, None


def _swap_args(source: str, node: ast.Call) -> Iterator[Edit]:
    if isinstance(node.func, ast.Name) and node.func.id in SYMMETRIC_CALLS:
        return
    values = [*node.args, *(k.value for k in node.keywords)]
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            mutated = copy.deepcopy(node)
            slots = [*mutated.args, *mutated.keywords]
            a, b = slots[i], slots[j]
            va = a.value if isinstance(a, ast.keyword) else a
            vb = b.value if isinstance(b, ast.keyword) else b
            _set_slot(mutated, i, vb)
            _set_slot(mutated, j, va)
            yield "swap-args", node, ast.unparse(mutated), None


def _set_slot(call: ast.Call, index: int, value: ast.expr) -> None:
    if index < len(call.args):
        call.args[index] = value
    else:
        call.keywords[index - len(call.args)].value = value


def _returns(tree: ast.FunctionDef) -> Iterator[Edit]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            for replacement in ("0", "num_new_tokens"):
                if ast.unparse(node.value) != replacement:
                    yield "return", node.value, replacement, None


def _edits() -> Iterator[Edit]:
    info = installed()
    tree, source = info.tree, info.source
    for index, node in enumerate(_value_sites(tree)):
        text = _segment(source, node)
        yield "plus1", node, f"({text} + 1)", index
        yield "minus1", node, f"({text} - 1)", index
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            yield from _ror(source, node)
            yield from _drop_operands(node)
        elif isinstance(node, ast.BoolOp):
            yield from _drop_operands(node)
        elif isinstance(node, ast.Call):
            yield from _min_max(node)
            yield from _swap_args(source, node)
    for condition in _conditions(tree):
        yield "negate", condition, f"(not ({_segment(source, condition)}))", None
    yield from _drop_stops(tree)
    yield from _returns(tree)


@functools.cache
def mutants() -> tuple[Mutant, ...]:
    """Every first-order mutant, in a fixed order; the same source text made twice (two operators that
    write the same edit) is kept once, under its first name."""
    info = installed()
    made: dict[str, Mutant] = {}
    per_line: dict[tuple[str, int], int] = {}
    ordered = sorted(_edits(), key=lambda e: (e[1].lineno, e[1].col_offset, e[0], e[2]))
    for operator, node, text, site in ordered:
        source = _replace(info.source, node, text)
        if source == info.source or source in made:
            continue
        line = info.first_line + node.lineno - 1
        n = per_line[(operator, line)] = per_line.get((operator, line), 0) + 1
        name = f"{operator.replace('-', '_')}_L{line}_{n}"
        made[source] = Mutant(name, operator, line, _segment(info.source, node), text, source,
                              info.source, site)
    return tuple(made.values())


# ---------------------------------------------------------------- as candidates


@functools.cache
def by_name() -> dict[str, Mutant]:
    return {m.name: m for m in mutants()}


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return by_name()[name].split
    except KeyError:
        raise AttributeError(name) from None
