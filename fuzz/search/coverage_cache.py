"""Probed code kept across runs: a harness worker's instrumentation of vLLM's scheduling code, reused.

Invariants: the key covers everything the patched code depends on, and the file must list exactly the functions to
patch now, else it is a miss; the cache never fails a run; files are written whole, the :data:`KEPT` newest kept."""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import sys
import types
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from fuzz.store.atomic import atomic_write

CACHE_ENV = "GDNFUZZ_CACHE_DIR"
KEPT = 4  # instrumentations kept (one per vLLM, atheris or gdnfuzz version in use)
SUFFIX = ".coverage.marshal"


def default_dir() -> Path:
    """``$GDNFUZZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/gdnfuzz``, else ``~/.cache/gdnfuzz``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gdnfuzz"


@dataclass(frozen=True)
class Codes:
    codes: list[types.CodeType]
    size: int  # counters the probes of ``codes`` use


def _identity(name: str, function: types.FunctionType) -> list[object]:
    return [name, function.__qualname__, function.__code__.co_filename, function.__code__.co_firstlineno]


class KeptInstrumentation:
    """The kept probed code of ``functions`` (module name, function) of ``modules``, first counter ``first``."""

    def __init__(self, directory: Path, modules: list[str], functions: list[tuple[str, types.FunctionType]],
                 first: int):
        self.directory = directory
        self.functions = [_identity(name, function) for name, function in functions]
        self.path = directory / f"{self._key(modules, first)}{SUFFIX}"

    @staticmethod
    def _key(modules: list[str], first: int) -> str:
        own = [Path(sys.modules[name].__file__ or "").read_bytes() for name in ("fuzz.search.coverage", __name__)]
        files = []
        for name in modules:
            path = getattr(sys.modules[name], "__file__", None)
            stat = os.stat(path) if path else None
            files.append([name, path, stat.st_size if stat else 0, stat.st_mtime_ns if stat else 0])
        parts = [sys.version, metadata.version("atheris"), [hashlib.sha256(b).hexdigest() for b in own], first, files]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]

    def load(self) -> Codes | None:
        """The kept code, or None (a miss: nothing kept for this key, or it does not read back)."""
        try:
            data = marshal.loads(self.path.read_bytes())
            if data["functions"] != self.functions or len(data["codes"]) != len(self.functions):
                return None
            if not all(isinstance(code, types.CodeType) for code in data["codes"]):
                return None
            return Codes(list(data["codes"]), int(data["size"]))
        except (OSError, EOFError, ValueError, TypeError, KeyError):
            return None

    def save(self, codes: list[types.CodeType], size: int) -> None:
        """Keep ``codes`` (portable form) for this key; drop all but the newest :data:`KEPT`."""
        try:
            atomic_write(self.path, marshal.dumps({"functions": self.functions, "codes": codes, "size": size}))
            kept = sorted(self.directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in kept[KEPT:]:
                old.unlink(missing_ok=True)
        except (OSError, ValueError):
            return
