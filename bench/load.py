"""Load beside a benchmark: what a shared CI runner's neighbours are."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """``count`` busy loops (``python -c 'while True: pass'``) running beside the block, stopped after it."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
