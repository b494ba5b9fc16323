"""Coverage of vLLM's scheduling code as libFuzzer 8-bit counters, at a third of the cost of atheris's own probes.

atheris's instrumenter (``atheris.patch_code``) puts a probe at the start of every basic block: the
call ``atheris._trace_branch(i)``, with the block's counter index ``i`` and the atheris module both
held as constants of the code. That call goes through pybind11 and costs about 130 ns, and an input
of the fuzz stream runs about 30,000 of them in vLLM's scheduling code: half the input's time. Here
the module constant of every patched function is swapped for ``Probes``' own namespace, whose
``_trace_branch`` is ``list.append`` (about 30 ns): a probe only records its index. Once per input,
before the input goes back to libFuzzer, ``Probes.flush`` turns the record into hit counts in a
counter array that is registered with libFuzzer like any sanitizer-coverage module.

Comparisons are not traced (``trace_dataflow=False``). libFuzzer uses traced comparisons only in its
own byte mutator (its table of compared values), which the harness calls for a tenth of the
mutations, on JSON scenarios that a binary integer inserted anywhere turns into a different random
scenario; the tracing cost 0.4 us a comparison, 4,000 comparisons an input.

Invariants:
- for every basic block of the patched functions, libFuzzer sees how many times the input ran it,
  capped at 255 (atheris's own counters wrap at 256 instead);
- a function is patched once, in place (``__code__``), so every reference to it runs the probes; the
  functions patched are those defined in the given modules' files (methods, properties and functions
  under decorators included), as atheris's import hook would patch them;
- probes run before the first input (imports, set-up) are not counted for any input;
- the patched code of a set of modules is kept across runs (``fuzz.search.coverage_cache``) and reused
  only where every module file, the function list, Python, atheris and this module are unchanged: a
  reused instrumentation is one an earlier patching of exactly this code made (atheris numbers the
  blocks differently in each process, so one patching is as good as another; a run uses one).
"""

from __future__ import annotations

import ctypes
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fuzz.search.coverage_cache import KeptInstrumentation, default_dir

PROBES_PLACEHOLDER = "__gdnfuzz_probes__"  # the probes' namespace, in probed code kept across runs
PC_BASE = 0x6764_6E00_0000  # the fake "program counters" of this module's table: distinct from atheris's (zero)
MAX_COUNT = 255


class Probes:
    """The probe calls of the code ``instrument`` patched, as counts for libFuzzer."""

    def __init__(self) -> None:
        import atheris

        self._atheris = atheris
        self.hits: list[int] = []
        self.namespace = types.ModuleType("gdnfuzz_probes")
        self.namespace._trace_branch = self.hits.append  # type: ignore[attr-defined]
        self.first = atheris._reserve_counter()  # counter indices this module's probes hold start past it
        self.size = 0
        self.counts: Any = None  # numpy uint8 view of the counter array, once sealed
        self._registered = False
        self.originals: list[tuple[types.FunctionType, types.CodeType]] = []  # each function's code before probes

    def patch(self, function: types.FunctionType) -> types.CodeType:
        """Instrument ``function`` (and the functions nested in it) in place; its probed code in the portable
        form :meth:`adopt` takes (the probes' namespace as the constant :data:`PROBES_PLACEHOLDER`)."""
        patched = self._atheris.patch_code(function.__code__, trace_dataflow=False)
        portable, count = _rewire(patched, lambda const: const is self._atheris, PROBES_PLACEHOLDER)
        if count == 0:
            raise RuntimeError(f"atheris's probes no longer hold the atheris module: {function.__qualname__}")
        self.adopt(function, portable)
        return portable

    def adopt(self, function: types.FunctionType, portable: types.CodeType) -> None:
        """Give ``function`` probed code in the portable form (patched here or kept from an earlier run)."""
        self.originals.append((function, function.__code__))
        function.__code__, _ = _rewire(portable, lambda const: type(const) is str and const == PROBES_PLACEHOLDER,
                                       self.namespace)

    def restore(self) -> None:
        """Every patched function runs its own code again (a sandbox child forked from a worker: its runs are
        not counted, and run faster without probes)."""
        for function, code in self.originals:
            function.__code__ = code

    def seal(self, size: int | None = None) -> None:
        """Size the counter array once every function is patched (``size``: as a kept instrumentation had it)."""
        self.size = self._atheris._reserve_counter() - self.first if size is None else size
        self._array = (ctypes.c_uint8 * self.size)()
        self._pcs = (ctypes.c_uint64 * (2 * self.size))(*_fake_pc_table(self.size))
        self.counts = np.frombuffer(self._array, dtype=np.uint8)

    def flush(self) -> None:
        """The counter array becomes the hit counts of the probes recorded since the last flush."""
        counts = np.bincount(np.array(self.hits, dtype=np.int64) - self.first, minlength=self.size)
        self.hits.clear()
        self.counts[:] = np.minimum(counts, MAX_COUNT)

    def counted(self, test_one_input: Callable[[bytes], None]) -> Callable[[bytes], None]:
        """``test_one_input`` with its probes' counts handed to libFuzzer after each input."""

        def counted_input(data: bytes) -> None:
            if not self._registered:
                self._register()
            try:
                test_one_input(data)
            finally:
                self.flush()

        return counted_input

    def _register(self) -> None:
        """Hand the counter array and its PC table to the libFuzzer atheris runs (loaded by ``atheris.Fuzz``)."""
        core = next((sys.modules[name] for name in ("atheris.core_with_libfuzzer", "atheris.core_without_libfuzzer")
                     if name in sys.modules), None)
        if core is None:
            raise RuntimeError("coverage probes: libFuzzer is not loaded (register from inside atheris.Fuzz)")
        library = ctypes.CDLL(core.__file__)
        counters = ctypes.addressof(self._array)
        pcs = ctypes.addressof(self._pcs)
        counters_init = getattr(library, "__sanitizer_cov_8bit_counters_init")  # getattr: no name mangling
        pcs_init = getattr(library, "__sanitizer_cov_pcs_init")
        counters_init(ctypes.c_void_p(counters), ctypes.c_void_p(counters + self.size))
        pcs_init(ctypes.c_void_p(pcs), ctypes.c_void_p(pcs + ctypes.sizeof(self._pcs)))
        self._registered = True
        self.hits.clear()  # set-up's probes belong to no input


def _fake_pc_table(size: int) -> Iterator[int]:
    """libFuzzer's PC table rows (pc, flags), one per counter: distinct pcs, no function-entry flags."""
    for i in range(size):
        yield PC_BASE + i
        yield 0


def _rewire(code: types.CodeType, is_old: Callable[[object], bool], new: object) -> tuple[types.CodeType, int]:
    """``code`` with every constant ``is_old`` accepts replaced by ``new``, in nested code too; and how many."""
    consts = []
    replaced = 0
    for const in code.co_consts:
        if is_old(const):
            const, n = new, 1
        elif isinstance(const, types.CodeType):
            const, n = _rewire(const, is_old, new)
        else:
            n = 0
        consts.append(const)
        replaced += n
    return (code.replace(co_consts=tuple(consts)) if replaced else code), replaced


def instrument(prefixes: tuple[str, ...], imports: tuple[str, ...], cache: Path | None = None) -> Probes:
    """Import ``imports``, then patch every function of every loaded module named by ``prefixes``, or reuse
    the patched code ``cache`` (a directory; default ``coverage_cache.default_dir()``) kept for exactly them."""
    for name in imports:
        importlib.import_module(name)
    probes = Probes()
    modules = sorted(name for name in sys.modules if name.startswith(prefixes) and sys.modules[name] is not None)
    functions = [(name, function) for name in modules if (path := getattr(sys.modules[name], "__file__", None))
                 for function in _functions_of(sys.modules[name], name, path, set())]
    kept = KeptInstrumentation(cache or default_dir(), modules, functions, probes.first)
    codes = kept.load()
    if codes is not None:
        for (_, function), code in zip(functions, codes.codes, strict=True):
            probes.adopt(function, code)
        probes.seal(codes.size)
        return probes
    patched = [probes.patch(function) for _, function in functions]
    probes.seal()
    kept.save(patched, probes.size)
    return probes


def _functions_of(namespace: Any, module: str, path: str, seen: set[int]) -> Iterator[types.FunctionType]:
    """The functions defined in ``path`` reachable from a module or class namespace, each once."""
    for value in list(vars(namespace).values()):
        if isinstance(value, type):
            if value.__module__ == module and id(value) not in seen:
                seen.add(id(value))
                yield from _functions_of(value, module, path, seen)
            continue
        for candidate in _callables_in(value):
            for function in _defined_in(candidate, path):
                if id(function) not in seen:
                    seen.add(id(function))
                    yield function


def _callables_in(value: Any) -> list[Any]:
    """What a class or module attribute runs: itself, a property's accessors, a static, class or cached method's function."""
    if isinstance(value, (staticmethod, classmethod)):
        return [value.__func__]
    if isinstance(value, property):
        return [value.fget, value.fset, value.fdel]
    if type(value).__name__ == "cached_property":
        return [value.func]
    return [value]


def _defined_in(value: Any, path: str) -> Iterator[types.FunctionType]:
    """``value`` and the functions under its decorators (``__wrapped__``) whose code is in ``path``."""
    while value is not None:
        if isinstance(value, types.FunctionType) and value.__code__.co_filename == path:
            yield value
        value = getattr(value, "__wrapped__", None)
