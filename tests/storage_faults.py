"""Storage faults made real for a while, and undone: a directory that refuses writes.

As root (whom no permission bit stops) the directory is bind-mounted read-only onto itself, so every
write under it meets ``EROFS`` as on a remounted store, and ``umount`` undoes it; otherwise its write
bits are taken away (``EACCES``) and given back. Used by the tests and by ``bench/cluster_faults.py``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def make_read_only(directory: Path) -> None:
    """Make ``directory`` refuse writes until :func:`make_writable`; raises ``OSError`` where that is not possible."""
    if os.geteuid() != 0:
        directory.chmod(directory.stat().st_mode & ~0o222)
        return
    for argv in (["mount", "--bind", str(directory), str(directory)],
                 ["mount", "-o", "remount,ro,bind", str(directory)]):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            if argv[1] != "--bind":
                subprocess.run(["umount", str(directory)], capture_output=True)
            raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")


def make_writable(directory: Path) -> None:
    if os.geteuid() != 0:
        directory.chmod(directory.stat().st_mode | 0o200)
        return
    subprocess.run(["umount", str(directory)], check=True, capture_output=True)


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` refuses writes inside the block. Where this machine cannot make it so, the test is
    skipped saying why; only that can skip: whatever the block raises is the test's."""
    try:
        make_read_only(directory)
    except OSError as exc:
        pytest.skip(f"cannot make a directory read-only here: {exc}")
    try:
        yield
    finally:
        make_writable(directory)
