"""Split policies: candidates and references for ``Scheduler._mamba_block_aligned_split`` (``SIGNATURE``).
Forms: built-in names, ``module:attr``, ``file.py:attr``, a vLLM checkout, ``branch:DIR``; a failure to resolve is a
:class:`PolicyError`. Only built-ins run in the resolving process, the other forms in sandbox children."""

from __future__ import annotations

import ast
import builtins
import dis
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.errors import InputError
from fuzz.model import json_input
from fuzz.model.checkout import (
    BRANCH_PREFIX,
    OVERLAID_FILES,
    OVERLAID_PACKAGES,
    CheckoutError,
    CheckoutMismatch,
    inside,
    overlay_files,
    unfit_for_installed,
)
from fuzz.model.deadline import DeadlineExceeded
from fuzz.model.decision import ask, describe
from fuzz.model.placement import current
from fuzz.model.result import SplitDisagreement

SplitFn = Callable[..., int]
SIGNATURE = (
    "_mamba_block_aligned_split(self, request, num_new_tokens, "
    "num_new_local_computed_tokens=0, num_external_computed_tokens=0) -> int"
)
CHECKOUT_SCHEDULER = Path("vllm/v1/core/sched/scheduler.py")
MAX_SOURCE_BYTES = 16 << 20  # vLLM's scheduler.py is about 100 kB


class PolicyError(InputError):
    """A policy that cannot be used, with the reason in one line."""


@dataclass(frozen=True)
class Policy:
    """A named split function. ``spec`` is what the user typed (kept for replay commands)."""

    name: str
    spec: str
    split: SplitFn
    description: str = ""
    # Whole-branch mode (``branch:DIR``, see fuzz.model.checkout): the checkout whose scheduling code the
    # sim tier runs in a candidate process of its own; ``split`` is then never installed anywhere.
    checkout: str | None = None
    # ``following(policy, reference, times)``: (the reference's spec, times); None for a policy as named.
    follows: tuple[str, int] | None = None
    # Loaded in a sandbox child (``fuzz.model.placement``): ``split`` asks that child for each answer, and
    # ``source`` is where the child found the split: (file, first line).
    sandboxed: bool = False
    source: tuple[str, int] | None = None

    def defined_at(self) -> tuple[str, int]:
        if self.source is not None:
            return self.source
        code = self.split.__code__
        return code.co_filename, code.co_firstlineno


class CandidateGone(BaseException):
    """A sandboxed candidate never answered (``process-exit``/``hang``): a run fault; nothing may swallow it."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind, self.detail = kind, detail


class Rewind(BaseException):
    """A taped run stops (``fuzz.sandbox.tape``: its tape refused, or the run interrupted while it waited on it);
    a BaseException, like CandidateGone, so no split's contract takes it for an answer."""


class SplitRaised(Exception):
    """A sandboxed split raised: ``description`` is what it raised, as :func:`describe_value` words it there."""

    def __init__(self, description: str):
        super().__init__(description)
        self.description = description


def not_loaded(spec: str) -> SplitFn:
    """The split of a policy that could not be loaded (a report still names it): calling it is a PolicyError."""

    def split(*_: Any) -> int:
        raise PolicyError(f"policy {spec} was not loaded")

    return split


# ---------------------------------------------------------------- built-ins


def _installed_split() -> SplitFn:
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler.__dict__["_mamba_block_aligned_split"]


def _vllm_split(self: Any, request: Any, num_new_tokens: int,
                num_new_local_computed_tokens: int = 0, num_external_computed_tokens: int = 0) -> int:
    return _installed_split()(self, request, num_new_tokens,
                              num_new_local_computed_tokens, num_external_computed_tokens)


def _pre_51113_split(self: Any, request: Any, num_new_tokens: int,
                     num_new_local_computed_tokens: int = 0, num_external_computed_tokens: int = 0) -> int:
    """The split before vLLM PR #51113: alignment gated on ``last_cache_position``, not
    the prefill end (past it any chunk end is accepted); it never defers a request."""
    from vllm.v1.core.sched.scheduler import get_mamba_prefill_checkpoint_position

    start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
    if start >= max(request.num_prompt_tokens, request.num_tokens - 1):
        return num_new_tokens
    block = self.cache_config.block_size
    # vLLM 0.33+: block hashes may cover the drafter's lookahead, which moves the last cacheable position
    lookahead = getattr(self, "num_hash_lookahead_tokens", 0)
    last_cache_position = get_mamba_prefill_checkpoint_position(
        request.num_tokens, block, self.use_eagle_block_drop,
        **({"num_hash_lookahead_tokens": lookahead} if lookahead else {})
    )
    end = start + num_new_tokens
    # (a) round the end down to a boundary only below last_cache_position
    if end < last_cache_position and end // block * block > start:
        end = end // block * block
    # (b) a mid-block start stops at the next boundary only if it is <= last_cache_position
    next_boundary = (start // block + 1) * block
    if start % block and next_boundary <= last_cache_position and next_boundary < end:
        end = next_boundary
    # (c) never run past last_cache_position inside a chunk
    if start < last_cache_position < end:
        end = last_cache_position
    return end - start


def _naive_split(self: Any, request: Any, num_new_tokens: int,
                 num_new_local_computed_tokens: int = 0, num_external_computed_tokens: int = 0) -> int:
    return num_new_tokens


BUILTINS: dict[str, tuple[SplitFn, str]] = {
    "vllm": (_vllm_split, "the installed vLLM's own Scheduler._mamba_block_aligned_split (default reference)"),
    "pre-51113": (_pre_51113_split, "the gate before vLLM PR #51113: aligns only below last_cache_position"),
    "naive": (_naive_split, "never aligns a chunk end (a canary policy: poisons any unaligned split)"),
}


def following(candidate: Policy, reference: Policy, times: int) -> Policy:
    """``candidate``, answering as ``reference`` at its first ``times`` disagreements; build one per run."""
    overridden = 0

    def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
              num_external_computed_tokens: int = 0) -> int:
        nonlocal overridden
        args = (num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        answer = candidate.split(self, request, *args)
        if overridden < times:
            expected = reference.split(self, request, *args)
            if expected != answer:
                overridden += 1
                return expected
        return answer

    return Policy(candidate.name, candidate.spec, split, candidate.description, candidate.checkout,
                  (reference.spec, times), candidate.sandboxed or reference.sandboxed)


def corrected(candidate: Policy, reference: Policy, stands_for: Callable[[SplitDisagreement], bool]) -> Policy:
    """``candidate``, answering as ``reference`` wherever they disagree in a decision ``stands_for`` accepts."""

    def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
              num_external_computed_tokens: int = 0) -> int:
        args = (num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        answer = candidate.split(self, request, *args)
        expected = ask(reference.split, self, request, args)
        if expected is not None and expected != answer and stands_for(
                describe(candidate.split, reference.split, self, request, args, answer, expected)):
            return expected
        return answer

    return Policy(candidate.name, candidate.spec, split, candidate.description, candidate.checkout,
                  candidate.follows, candidate.sandboxed or reference.sandboxed)


def is_builtin(spec: str) -> bool:
    """Whether ``spec`` names one of gdnfuzz's own policies (its code, or the installed vLLM's split)."""
    return spec in BUILTINS


def named_in_data(spec: Any, where: str, flag: str) -> str:
    """A built-in policy a file names (``where``); any other is a PolicyError: data never makes gdnfuzz run code."""
    if isinstance(spec, str) and spec in BUILTINS:
        return spec
    shown = describe_value(spec)
    raise PolicyError(f"{where}: names the policy {shown}, which is code: gdnfuzz never loads a policy a file "
                      f"names (only {', '.join(BUILTINS)}); to run it, give it yourself: {flag} {shown}")


# ---------------------------------------------------------------- installation

ContractViolation = Callable[[Any, str], None]  # (vLLM request, one-line detail)


def contract_checked(split: SplitFn, on_violation: ContractViolation) -> SplitFn:
    """``split`` as every tier installs it: the scheduler only sees an ``int`` in ``[0, num_new_tokens]``; anything else
    goes to ``on_violation`` and is clamped or 0 (any BaseException too, but for the four re-raised below)."""

    def checked(self: Any, request: Any, num_new_tokens: int,
                num_new_local_computed_tokens: int = 0, num_external_computed_tokens: int = 0) -> int:
        try:
            got = split(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        except (DeadlineExceeded, CandidateGone, CheckoutMismatch, Rewind):
            raise
        except BaseException as exc:  # noqa: BLE001 - whatever a policy raises is its finding, never our exit
            unfit = unfit_for_installed(exc)
            if unfit is not None:
                raise CheckoutMismatch(unfit) from None
            raised = exc.description if isinstance(exc, SplitRaised) else describe_value(exc)
            on_violation(request, f"split raised {raised} when offered {num_new_tokens} tokens")
            return 0
        if type(got) is int and 0 <= got <= num_new_tokens:
            return got
        on_violation(request, f"split returned {describe_value(got)} when offered {num_new_tokens} tokens")
        return _clamped(got, num_new_tokens)

    return checked


def _clamped(got: Any, num_new_tokens: int) -> int:
    if type(got) is float and math.isfinite(got):
        got = int(got)
    return max(0, min(got, num_new_tokens)) if type(got) is int else 0


def describe_value(value: Any) -> str:
    """A short description of what a policy gave, that cannot itself raise (a hostile ``__repr__``)."""
    try:
        text = f"{type(value).__name__}({value})" if isinstance(value, BaseException) else repr(value)
    except Exception:  # noqa: BLE001 - describing a value must not fail
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


# ---------------------------------------------------------------- resolution


def check_signature(fn: Any, origin: str) -> SplitFn:
    """Raise PolicyError unless ``fn`` can be called the way the scheduler calls the split."""
    if not callable(fn):
        raise PolicyError(f"policy {origin}: {type(fn).__name__} is not callable")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"policy {origin}: cannot read its signature ({exc})") from None
    try:
        sig.bind(None, None, 0)
        sig.bind(None, None, 0, 0, 0)
    except TypeError:
        raise PolicyError(f"policy {origin}: signature {sig} does not fit {SIGNATURE}") from None
    return fn


def _from_module(module_name: str, attr: str, spec: str) -> SplitFn:
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - whatever an import raises is the user's to see, in one line
        raise PolicyError(f"policy {spec}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    return _attr(module, attr, spec)


def _attr(owner: Any, dotted: str, spec: str) -> SplitFn:
    obj = owner
    for part in dotted.split("."):
        if not hasattr(obj, part):
            raise PolicyError(f"policy {spec}: no attribute {dotted!r}")
        obj = getattr(obj, part)
    obj = obj.__func__ if inspect.ismethod(obj) else obj
    return check_signature(obj, spec)


def _from_file(path: Path, attr: str, spec: str) -> SplitFn:
    if not path.is_file():
        raise PolicyError(f"policy {spec}: no such file {path}")
    module_spec = importlib.util.spec_from_file_location(f"gdnfuzz_policy_{abs(hash(str(path.resolve())))}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # as an import would: a dataclass in the file looks its module up
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - as in _from_module
        del sys.modules[module_spec.name]
        raise PolicyError(f"policy {spec}: {path} failed to load ({type(exc).__name__}: {exc})") from None
    return _attr(module, attr, spec)


def _from_checkout(root: Path, spec: str) -> SplitFn:
    """Compile a checkout's split against the installed scheduler module's globals."""
    source_file = _inside(root, CHECKOUT_SCHEDULER, spec)
    if not source_file.is_file():
        raise PolicyError(f"policy {spec}: {root} is not a vLLM checkout (no {CHECKOUT_SCHEDULER})")
    text = json_input.read_text(source_file, lambda _, why: PolicyError(f"policy {spec}: {source_file}: {why}"),
                                MAX_SOURCE_BYTES)
    try:
        tree = ast.parse(text, filename=str(source_file))
    except SyntaxError as exc:
        raise PolicyError(f"policy {spec}: {source_file}:{exc.lineno}: syntax error") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # a NUL byte, nesting the parser cannot take
        raise PolicyError(f"policy {spec}: {source_file}: not Python source ({type(exc).__name__}: {exc})") from None
    method = next(
        (
            node
            for cls in tree.body
            if isinstance(cls, ast.ClassDef) and cls.name == "Scheduler"
            for node in cls.body
            if isinstance(node, ast.FunctionDef) and node.name == "_mamba_block_aligned_split"
        ),
        None,
    )
    if method is None:
        raise PolicyError(f"policy {spec}: {source_file} has no Scheduler._mamba_block_aligned_split")
    import vllm.v1.core.sched.scheduler as installed

    namespace = dict(vars(installed))
    code = compile(ast.Module(body=[method], type_ignores=[]), str(source_file), "exec")
    exec(code, namespace)
    fn = namespace["_mamba_block_aligned_split"]
    missing = sorted(
        name for name in _global_names(fn.__code__) if name not in namespace and not hasattr(builtins, name)
    )
    if missing:
        raise PolicyError(
            f"policy {spec}: the checkout's split uses {', '.join(missing)}, which the installed vLLM lacks"
        )
    return check_signature(fn, spec)


def _global_names(code: Any) -> set[str]:
    """Names the code looks up as globals (attribute names are not lookups)."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _global_names(const)
    return names


def _inside(root: Path, relative: Path, spec: str) -> Path:
    try:
        return inside(root, relative)
    except CheckoutError as exc:
        raise PolicyError(f"policy {spec}: {exc}") from None


def _branch_policy(root: Path, spec: str) -> Policy:
    """Whole-branch mode (sim tier only): only the checkout's file names are read here (a link out is refused)."""
    if not _inside(root, CHECKOUT_SCHEDULER, spec).is_file():
        raise PolicyError(f"policy {spec}: {root} is not a vLLM checkout (no {CHECKOUT_SCHEDULER})")
    try:
        overlay_files(root)
    except CheckoutError as exc:
        raise PolicyError(f"policy {spec}: {exc}") from None

    def split(*_: Any) -> int:
        raise PolicyError(f"policy {spec}: whole-branch mode runs on the sim tier only (its split is the branch's own)")

    return Policy(f"branch:{root.name}", spec, split,
                  f"whole branch: {', '.join(OVERLAID_PACKAGES + OVERLAID_FILES)} from {root}",
                  checkout=str(root.resolve()))


def resolve_policy(spec: str) -> Policy:
    """What the user typed as a Policy; a non-built-in loads only in a sandbox child of the open scope, else errs."""
    if spec in BUILTINS:
        fn, description = BUILTINS[spec]
        return Policy(spec, spec, fn, description)
    if spec.startswith(BRANCH_PREFIX):
        return _branch_policy(Path(spec.removeprefix(BRANCH_PREFIX)), spec)
    placement = current()
    if placement is None:
        raise PolicyError(f"policy {spec}: no sandbox is open in this process to load it in "
                          f"(fuzz.sandbox.scope.deciding or ambient; a gdnfuzz bug)")
    return placement.resolve(spec)


def load_policy(spec: str) -> Policy:
    """``spec`` loaded in THIS process whatever scope is open: for sandbox children and trusted code only."""
    if spec in BUILTINS or spec.startswith(BRANCH_PREFIX):
        return resolve_policy(spec)
    name, description = named(spec)
    path = Path(spec)
    if path.is_dir():
        return Policy(name, spec, _from_checkout(path, spec), description)
    target, attr = spec.rsplit(":", 1)
    fn = _from_file(Path(target), attr, spec) if target.endswith(".py") else _from_module(target, attr, spec)
    return Policy(name, spec, fn, description)


def named(spec: str) -> tuple[str, str]:
    """A non-built-in policy's name and description, from its spec alone (no code read)."""
    path = Path(spec)
    if path.is_dir():
        return (f"checkout:{path.name}", f"split-only: {path}'s Scheduler._mamba_block_aligned_split on the "
                                         f"installed scheduler (use {BRANCH_PREFIX}{path} for its whole scheduling code)")
    if ":" in spec:
        target, attr = spec.rsplit(":", 1)
        return spec, f"{attr} from {target}"
    raise PolicyError(
        f"unknown policy {spec!r}: use one of {', '.join(BUILTINS)}, module:attr, file.py:attr, or a vLLM checkout"
    )
