"""vLLM's own Triton kernels, run on CPU by Triton's interpreter: every workaround in one place.

Invariants: each change is scoped (vLLM's and Triton's modules are as they were after :func:`interpreted` and each
:meth:`Interpreted.running`; only private copies ``_gdnfuzz_interpreted_*`` keep theirs, Triton adds only new global
names) but fla-core's import (:meth:`Interpreted.fla_core`), refused with CUDA, with ``fla`` imported, or under fewer
than all workarounds. Not worked around: bf16 is computed on raw bit patterns, so callers pass float16 instead."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import math
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any


class Workaround(StrEnum):
    SINGLE_CONFIG = "single-config"  # each autotune keeps its largest-tile config (no driver to benchmark with)
    BUILTIN_ALIASES = "builtin-aliases"  # an alias such as ``exp = tl.exp`` looks ``tl.exp`` up when called
    LOOP_INDEX = "loop-index"  # ``range`` yields ints that also have ``.to`` (``i_t.to(tl.int64)``)
    STDLIB = "stdlib"  # ``triton.language.standard``'s JITFunctions swapped for interpreted ones while running
    BOOL_MASK = "bool-mask"  # masked loads and stores take ``mask != 0`` (a scalar compare can give int32 0/1)


ALL = frozenset(Workaround)

# key -> (vLLM module, is a package): the Triton code this module runs.
SOURCES: dict[str, tuple[str, bool]] = {
    "fla": ("vllm.third_party.flash_linear_attention.ops", True),
    "mamba_utils": ("vllm.v1.worker.mamba_utils", False),
    "ssd_checkpoint": ("vllm.model_executor.layers.mamba.ops.ssd_checkpoint", False),
}
LENT = ("triton", "tl", "tldevice")  # what vLLM's kernel modules import from vllm.triton_utils


FLA_CORE = "fla.ops.gated_delta_rule"


def fla_core_unavailable_reason() -> str | None:
    """None when fla-core's kernels can run under the interpreter in this process, else why not (one line)."""
    import torch  # noqa: PLC0415

    if torch.cuda.is_available():
        return "a CUDA device is here: fla-core runs compiled, in the triton backend"
    if "fla" in sys.modules and not _fla_core_interpreted:
        return "fla-core is already imported in this process, compiled"
    if importlib.util.find_spec("fla") is None:
        return "fla-core is not installed (bench/gpu_check.sh installs bench/wheels into a scratch directory)"
    return None


_fla_core_interpreted = False


def unavailable_reason() -> str | None:
    """None when vLLM's Triton kernels can run under the interpreter here, else why not (one line)."""
    try:
        importlib.import_module("triton.runtime.interpreter")
    except Exception as exc:  # noqa: BLE001 - any import failure means "not here"
        return f"Triton's interpreter does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    for key, (name, _) in SOURCES.items():
        try:
            if importlib.util.find_spec(name) is None:
                return f"this vLLM has no {name} ({key})"
        except Exception as exc:  # noqa: BLE001 - vllm itself missing or broken
            return f"vLLM's {name} is not importable ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    return None


@dataclass
class Launch:
    """One kernel launch under the interpreter: which kernel, its wall time, and its error if it failed."""

    kernel: str
    seconds: float
    error: str | None = None


@dataclass(frozen=True)
class KernelFailure:
    """A kernel the interpreter cannot run: its name, the interpreter's error, and the construct (its failing line)."""

    kernel: str
    error: str
    construct: str

    def describe(self) -> str:
        return f"{self.kernel}: {self.error} at {self.construct}"


def failure_of(exc: BaseException, kernel: str = "") -> KernelFailure:
    """What an error out of a launch reports: the innermost error of its ``__cause__`` chain and the innermost line
    of vLLM's files it went through (the construct); ``kernel`` defaults to that line's function."""
    chain = [exc]
    while chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    inner, last = chain[-1], None
    for error in chain:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if "/vllm/" in f.filename.replace("\\", "/")]
        last = frames[-1] if frames else last
    if last is None:
        return KernelFailure(kernel or "?", f"{type(inner).__name__}: {inner}", "(no line of vLLM's)")
    construct = f"{Path(last.filename).name}:{last.lineno} `{(last.line or '').strip()}`"
    return KernelFailure(kernel or last.name, f"{type(inner).__name__}: {inner}", construct)


class _LoopIndex(int):
    """A ``range`` index that is still a plain int, and casts itself like the compiler's loop variable."""

    def to(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        from triton.runtime.interpreter import _implicit_cvt  # noqa: PLC0415 - the interpreter's own int -> tensor

        return _implicit_cvt(int(self)).to(dtype, *args, **kwargs)


def _loop_range(*args: Any) -> Iterator[int]:
    for i in range(*args):
        yield _LoopIndex(i)


def _tile_size(config: Any) -> int:
    """The product of a ``triton.Config``'s integer meta-parameters (its tile sizes)."""
    return math.prod(v for v in config.kwargs.values() if isinstance(v, int) and not isinstance(v, bool))


def _late_bound(tl: ModuleType, name: str) -> Callable[..., Any]:
    """``tl.<name>`` looked up at call time, so the interpreter's patch of it applies."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(tl, name)(*args, **kwargs)

    call.__name__ = name
    return call


class Interpreted:
    """Private interpreter-ready copies of vLLM's Triton modules, under one set of workarounds. Invariant: their kernels
    are ``InterpretedFunction`` objects, and every launch through :meth:`running` is recorded as a :class:`Launch`."""

    def __init__(self, workarounds: frozenset[Workaround] = ALL):
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        import triton  # noqa: PLC0415 - only where the interpreter is wanted
        import triton.experimental.gluon  # noqa: F401, PLC0415 - imported lazily by Triton; not mid-swap
        import triton.language as tl  # noqa: PLC0415
        from triton.runtime.interpreter import InterpretedFunction  # noqa: PLC0415
        from triton.runtime.jit import JITFunction  # noqa: PLC0415

        self.workarounds = workarounds
        self._triton, self._tl = triton, tl
        self._tag = "_".join(sorted(w.name.lower() for w in workarounds)) or "bare"
        self._modules: dict[str, ModuleType] = {}
        self._launches: list[Launch] | None = None
        # The standard library's JIT functions and their interpreted twins, per owner.
        owners = [tl, tl.standard, tl.random, tl.core.tensor]
        self._stdlib = [(owner, name, fn, InterpretedFunction(fn.fn)) for owner in owners
                        for name, fn in list(vars(owner).items()) if isinstance(fn, JITFunction)]

    # ------------------------------------------------------------ loading

    def module(self, key: str) -> ModuleType:
        """The private copy of ``SOURCES[key]`` (loaded on first use)."""
        if key not in self._modules:
            self._modules[key] = self._load(key)
        return self._modules[key]

    def fla_core(self) -> ModuleType:
        """fla-core's gated delta rule ops, imported with the interpreter on (see the module docstring)."""
        global _fla_core_interpreted
        if "fla_core" not in self._modules:
            reason = fla_core_unavailable_reason()
            if reason:
                raise RuntimeError(reason)
            if self.workarounds != ALL:
                raise RuntimeError("fla-core is imported once per process, with every workaround")
            with self._triton.knobs.runtime.scope():
                self._triton.knobs.runtime.interpret = True
                module = importlib.import_module(FLA_CORE)
            _fla_core_interpreted = True
            for name, loaded in list(sys.modules.items()):
                if name == "fla" or name.startswith("fla."):
                    self._prepare(loaded)
            self._modules["fla_core"] = module
        return self._modules["fla_core"]

    def _load(self, key: str) -> ModuleType:
        name, is_package = SOURCES[key]
        spec = importlib.util.find_spec(name)
        private = f"_gdnfuzz_interpreted_{self._tag}_{key}"
        origin = Path(spec.origin)
        copy_spec = importlib.util.spec_from_file_location(
            private, origin, submodule_search_locations=[str(origin.parent)] if is_package else None)
        module = importlib.util.module_from_spec(copy_spec)
        sys.modules[private] = module  # relative imports and dataclasses look the copy up here
        try:
            with self._lent_triton():
                copy_spec.loader.exec_module(module)
        except BaseException:
            for loaded in [m for m in sys.modules if m == private or m.startswith(private + ".")]:
                del sys.modules[loaded]
            raise
        for loaded in [m for n, m in sys.modules.items() if n == private or n.startswith(private + ".")]:
            self._prepare(loaded)
        return module

    @contextlib.contextmanager
    def _lent_triton(self) -> Iterator[None]:
        """``vllm.triton_utils`` lends the real Triton, and ``@triton.jit`` makes interpreted functions."""
        import triton.language.extra.libdevice as tldevice  # noqa: PLC0415
        import vllm.triton_utils as utils  # noqa: PLC0415 - vLLM's modules import Triton through it

        saved = {name: getattr(utils, name) for name in LENT}
        real = {"triton": self._triton, "tl": self._tl, "tldevice": tldevice}
        with self._triton.knobs.runtime.scope():
            self._triton.knobs.runtime.interpret = True
            try:
                for name in LENT:
                    setattr(utils, name, real[name])
                yield
            finally:
                for name, value in saved.items():
                    setattr(utils, name, value)

    def _prepare(self, module: ModuleType) -> None:
        """The per-copy workarounds, and the launch recorder on every kernel."""
        from triton.runtime.autotuner import Autotuner, Heuristics  # noqa: PLC0415
        from triton.runtime.interpreter import InterpretedFunction  # noqa: PLC0415

        builtins = {id(v): n for n, v in vars(self._tl).items() if self._tl.core.is_builtin(v)}
        if Workaround.LOOP_INDEX in self.workarounds:
            module.range = _loop_range
        for attr, value in list(vars(module).items()):
            if Workaround.BUILTIN_ALIASES in self.workarounds and id(value) in builtins:
                setattr(module, attr, _late_bound(self._tl, builtins[id(value)]))
            wrapped = value
            while isinstance(wrapped, Autotuner | Heuristics):
                if isinstance(wrapped, Autotuner) and Workaround.SINGLE_CONFIG in self.workarounds:
                    wrapped.configs = [max(wrapped.configs, key=_tile_size)]
                wrapped = wrapped.fn
            if isinstance(wrapped, InterpretedFunction) and "run" not in vars(wrapped):
                wrapped.run = self._recorded(wrapped.__name__, wrapped.run)

    def _recorded(self, kernel: str, run: Callable[..., Any]) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            t0, error = time.perf_counter(), None
            try:
                return run(*args, **kwargs)
            except Exception as exc:
                error = failure_of(exc, kernel).error
                raise
            finally:
                if self._launches is not None:
                    self._launches.append(Launch(kernel, time.perf_counter() - t0, error))

        return launch

    # ------------------------------------------------------------ running

    @contextlib.contextmanager
    def running(self) -> Iterator[list[Launch]]:
        """Kernels of the copies may be launched inside; yields the launches. numpy float warnings are off."""
        import numpy as np  # noqa: PLC0415

        launches: list[Launch] = []
        outer, self._launches = self._launches, launches
        with contextlib.ExitStack() as stack:
            stack.enter_context(np.errstate(all="ignore"))
            if Workaround.STDLIB in self.workarounds:
                stack.enter_context(self._interpreted_stdlib())
            if Workaround.BOOL_MASK in self.workarounds:
                stack.enter_context(self._bool_masks())
            try:
                yield launches
            finally:
                self._launches = outer
                if outer is not None:
                    outer.extend(launches)

    @contextlib.contextmanager
    def _interpreted_stdlib(self) -> Iterator[None]:
        for owner, name, _, interpreted in self._stdlib:
            setattr(owner, name, interpreted)
        try:
            yield
        finally:
            for owner, name, original, _ in self._stdlib:
                setattr(owner, name, original)

    @staticmethod
    @contextlib.contextmanager
    def _bool_masks() -> Iterator[None]:
        import numpy as np  # noqa: PLC0415
        from triton.runtime.interpreter import InterpreterBuilder, TensorHandle  # noqa: PLC0415

        load, store = InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store

        def as_bool(mask: Any) -> Any:
            return mask if mask.data.dtype == np.bool_ else TensorHandle(mask.data != 0, mask.dtype)

        InterpreterBuilder.create_masked_load = lambda self, ptrs, mask, *rest, **kw: load(
            self, ptrs, as_bool(mask), *rest, **kw)
        InterpreterBuilder.create_masked_store = lambda self, ptrs, value, mask, *rest, **kw: store(
            self, ptrs, value, as_bool(mask), *rest, **kw)
        try:
            yield
        finally:
            InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store = load, store


@functools.cache
def interpreted(workarounds: frozenset[Workaround] = ALL) -> Interpreted:
    """This process's copies for one set of workarounds (made once)."""
    return Interpreted(workarounds)
