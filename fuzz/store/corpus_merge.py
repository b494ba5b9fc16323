"""Corpus merge: keep the shared corpus (``corpus/queue/``'s top level; ``queue/<actor>/``: a fuzzer's working dir)
small with no loss of coverage, by libFuzzer's ``-set_cover_merge=1`` over the seeds and regressions. Invariants: a
failed merge changes nothing under ``corpus/queue/``; the shared corpus becomes the selected inputs (SHA-1 names);
listed candidates selected or redundant are removed, later files never; each working dir gets the others' selected
inputs; an input over :data:`MAX_INPUT_BYTES` is never read whole, copied nor removed, only reported (``skipped``)."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import ToolError
from fuzz.interpreter import python_command
from fuzz.store.atomic import atomic_write

SUMMARY = re.compile(r"MERGE-OUTER: (\d+) new files with (\d+) new features added; (\d+) new coverage edges")
WRAPPER = """#!/bin/sh
exec {python} -c 'import sys; from fuzz.search.harness import main; main(sys.argv[1:])' "$0" "$@"
"""
# The outer merge process only spawns the inner one and reads its control file: no target, so no vLLM import.
OUTER = "import sys, atheris; atheris.Setup(sys.argv[1:], lambda data: None); atheris.Fuzz()"


MAX_INPUT_BYTES = 16384  # libFuzzer's -max_len in gdnfuzz's flags (fuzz.search.libfuzzer.DEFAULT_FLAGS)


class MergeError(ToolError):
    """The merge did not complete; the corpus was left as it was."""


@dataclass(frozen=True)
class MergeReport:
    candidates: int  # files under corpus/queue before the merge
    kept: int  # the shared corpus after it
    removed: int  # working-directory or shared files dropped (redundant or moved into the shared corpus)
    shared_out: int  # selected inputs copied into other fuzzers' working directories
    features: int  # new features the kept inputs add over the seeds and regressions
    edges: int
    seconds: float
    skipped: tuple[Path, ...] = ()  # inputs over the size limit, left where they are


def content_name(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


CONTENT_NAME = re.compile(r"[0-9a-f]{40}")


def remove_torn_inputs(directory: Path) -> list[Path]:
    """Remove and return the queue files whose content lacks the SHA-1 naming them; only while nothing writes there."""
    torn = [p for p in list_inputs(directory)
            if CONTENT_NAME.fullmatch(p.name) and content_name(p.read_bytes()) != p.name]
    for path in torn:
        path.unlink(missing_ok=True)
    return torn


def list_inputs(directory: Path) -> list[Path]:
    """Every regular, non-hidden file under ``directory`` (recursively, as libFuzzer reads corpus dirs)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith("."))


def _wrapper(tmp: Path) -> Path:
    """An executable running the harness: libFuzzer's merge re-executes ``argv[0]`` for its inner pass."""
    path = tmp / "gdnfuzz-harness"
    path.write_text(WRAPPER.format(python=shlex.join(python_command())))
    path.chmod(0o755)
    return path


def run_libfuzzer_merge(out: Path, candidates: list[Path], env: dict[str, str], timeout: float,
                        flags: tuple[str, ...] = (), mode: str = "-set_cover_merge=1") -> tuple[int, int, int]:
    """Merge ``candidates`` into ``out`` (``mode``: ``-set_cover_merge=1`` or ``-merge=1``): files, features, edges."""
    with tempfile.TemporaryDirectory(prefix="gdnfuzz-merge-") as tmp:
        cmd = [*python_command("-c", OUTER), str(_wrapper(Path(tmp))), mode, f"-merge_control_file={Path(tmp) / 'control'}",
               *flags, str(out), *map(str, candidates)]
        try:
            proc = subprocess.run(cmd, env=env, cwd=os.getcwd(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise MergeError(f"merge timed out after {timeout:.0f}s") from None
    summary = SUMMARY.search(proc.stderr)
    if proc.returncode != 0 or summary is None:
        raise MergeError(f"merge exited {proc.returncode}: " + " | ".join(proc.stderr.strip().splitlines()[-3:]))
    files, features, edges = map(int, summary.groups())
    return files, features, edges


def merge_corpus(queue: Path, baseline: list[Path], env: dict[str, str], timeout: float = 600,
                 flags: tuple[str, ...] = (), max_bytes: int = MAX_INPUT_BYTES) -> MergeReport:
    """Set-cover merge of everything under ``queue`` into its top level (see the module invariants)."""
    start = time.monotonic()
    contents, oversized = read_inputs(list_inputs(queue), max_bytes)
    listed = list(contents)
    workdirs = sorted(d for d in queue.iterdir() if d.is_dir()) if queue.is_dir() else []
    with tempfile.TemporaryDirectory(prefix=".merge-", dir=queue.parent) as tmp:
        out, cand = Path(tmp) / "out", Path(tmp) / "candidates"
        out.mkdir()
        cand.mkdir()
        for directory in baseline:
            committed, too_big = read_inputs(list_inputs(directory), max_bytes)
            oversized += too_big
            for i, data in enumerate(committed.values()):
                (out / f"baseline-{directory.name}-{i}").write_bytes(data)
        origin: dict[str, set[Path]] = {}  # content name -> the directories it was listed in
        for path, data in contents.items():
            name = content_name(data)
            origin.setdefault(name, set()).add(path.parent)
            (cand / name).write_bytes(data)
        _, features, edges = run_libfuzzer_merge(out, [cand], env, timeout, flags)
        selected = {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith("baseline-")}
    for name, data in selected.items():
        if not (queue / name).exists():
            atomic_write(queue / name, data)
    removed = 0
    for path in listed:
        if path.parent == queue and path.name in selected:
            continue
        path.unlink(missing_ok=True)
        removed += 1
    shared_out = 0
    for workdir in workdirs:
        for name, data in selected.items():
            if workdir not in origin.get(name, {queue}) and queue not in origin.get(name, set()):
                atomic_write(workdir / name, data)
                shared_out += 1
    return MergeReport(len(listed), len(selected), removed, shared_out, features, edges,
                       time.monotonic() - start, tuple(oversized))


def read_inputs(paths: list[Path], max_bytes: int) -> tuple[dict[Path, bytes], list[Path]]:
    """The contents of inputs of at most ``max_bytes``, and the others; none is read past ``max_bytes + 1`` bytes."""
    contents: dict[Path, bytes] = {}
    oversized: list[Path] = []
    for path in paths:
        if path.stat().st_size > max_bytes:
            oversized.append(path)
            continue
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            oversized.append(path)
        else:
            contents[path] = data
    return contents, oversized
