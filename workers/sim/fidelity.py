"""The sim tier's fidelity guard: the vLLM functions the runner mirror still copies, fingerprinted.

Each of :data:`MIRRORED` is the SHA-256 of its exact source, read with ``ast``; ``mirror_fingerprints.json`` holds
those checked, per vLLM version. Invariant: a sim run never starts silently on a vLLM whose mirrored code matches
no checked version: :func:`check_mirror_fidelity` warns naming each, or raises :class:`FidelityError` when strict
(``GDNFUZZ_STRICT_FIDELITY=1``, or ``CI`` set unless it is ``0``). Record only after re-checking the mirror."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import InputError
from fuzz.store.atomic import atomic_write

FINGERPRINTS = Path(__file__).with_name("mirror_fingerprints.json")
STRICT_ENV = "GDNFUZZ_STRICT_FIDELITY"
CI_ENV = "CI"
# (module, qualified name): each one named in runner_mirror's docstring as mirrored (what it calls is not here).
MIRRORED: tuple[tuple[str, str], ...] = (
    ("vllm.v1.worker.mamba_utils", "postprocess_mamba_fused_kernel"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._update_states"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._update_states_after_model_execute"),
    ("vllm.v1.worker.gpu_worker", "Worker.initialize_from_config"),
    ("vllm.model_executor.layers.mamba.ops.ssd_checkpoint", "store_prefill_checkpoint"),
)


class FidelityError(InputError):
    """Strict mode: the installed vLLM's mirrored code is not the code the mirror was checked against."""


@dataclass(frozen=True)
class Mismatch:
    function: str  # module:qualname
    reason: str  # "changed" or why it could not be read

    def __str__(self) -> str:
        return f"{self.function} {self.reason}"


@functools.lru_cache(maxsize=16)
def _parsed(path: str) -> tuple[str, list[ast.stmt]]:
    """A source file's text and its top-level statements (several mirrored functions share a file)."""
    text = Path(path).read_text()
    return text, ast.parse(text).body


def source_of(module: str, qualname: str) -> str:
    """The exact source text of ``module``'s ``qualname`` (``Class.method`` or ``function``), unimported."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError("module not found")
    text, body = _parsed(spec.origin)
    node: ast.AST | None = None
    for part in qualname.split("."):
        node = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                     and n.name == part), None)
        if node is None:
            raise LookupError(f"no {part} in {spec.origin}")
        body = node.body  # type: ignore[attr-defined]
    segment = ast.get_source_segment(text, node, padded=True)
    assert segment is not None
    return segment


def fingerprint(module: str, qualname: str) -> str:
    return hashlib.sha256(source_of(module, qualname).encode()).hexdigest()


def current_fingerprints() -> dict[str, str]:
    return {f"{m}:{q}": fingerprint(m, q) for m, q in MIRRORED}


def recorded() -> dict[str, dict[str, str]]:
    """vLLM version -> its mirrored functions' fingerprints, for every version the mirror was checked against."""
    return json.loads(FINGERPRINTS.read_text())["checked"]


def checked_versions() -> list[str]:
    return sorted(recorded(), key=lambda v: tuple(int(p) if p.isdigit() else 0 for p in v.split(".")))


def mismatches() -> list[Mismatch]:
    """Each mirrored function whose installed source matches the fingerprint of no version checked."""
    checked = recorded()
    found: list[Mismatch] = []
    for module, qualname in MIRRORED:
        name = f"{module}:{qualname}"
        try:
            now = fingerprint(module, qualname)
        except (LookupError, OSError, SyntaxError, ImportError) as exc:
            found.append(Mismatch(name, f"cannot be read ({exc})"))
            continue
        known = {functions[name] for functions in checked.values() if name in functions}
        if now not in known:
            found.append(Mismatch(name, "changed" if known else "was never checked"))
    return found


def record() -> Path:
    """Add the installed vLLM's fingerprints to the checked ones (after re-checking the mirror)."""
    from fuzz.model.vllm_build import installed_vllm

    checked = {**recorded(), installed_vllm().version: current_fingerprints()}
    atomic_write(FINGERPRINTS, json.dumps({"checked": checked}, indent=1, sort_keys=True) + "\n")
    return FINGERPRINTS


def strict_from_env() -> bool:
    """Strict where asked (``GDNFUZZ_STRICT_FIDELITY``), and in CI unless asked not to be."""
    asked = os.environ.get(STRICT_ENV)
    if asked is not None and asked != "":
        return asked != "0"
    return os.environ.get(CI_ENV, "") not in ("", "0", "false")


def check_mirror_fidelity(strict: bool | None = None) -> list[Mismatch]:
    """Warn (or, strict, raise FidelityError) naming each mirrored vLLM function that changed."""
    found = mismatches()
    if not found:
        return found
    versions = ", ".join(checked_versions())
    message = (f"the sim tier's runner mirror (workers/sim/runner_mirror.py) was checked against vLLM {versions}; "
               f"in the installed vLLM these differ: {'; '.join(map(str, found))}")
    if strict_from_env() if strict is None else strict:
        raise FidelityError(message)
    warnings.warn(message + ": re-check the mirror before trusting sim verdicts", stacklevel=2)
    return found
