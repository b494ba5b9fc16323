"""The input a harness worker is running, kept on disk, so that a worker that dies without a word (a
candidate calling ``os._exit(0)``, a SIGKILL, the kernel's OOM killer) still leaves the input it died on.

Layout of ``<worker raw dir>/.in-flight``: one flag byte (1 while an input runs, 0 between inputs),
the input's length (8 bytes, little-endian), the input. Invariant: the flag is 1 exactly from before
the worker starts an input until it has returned from it, so a flag of 1 in a dead worker's file names
the input that was running when it died; each update is one ``pwrite`` (no fsync: a worker's death is
not the machine's, and the page cache outlives the process).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

NAME = ".in-flight"
HEADER = struct.Struct("<BQ")


class InFlight:
    """The worker's side: :meth:`start` before an input, :meth:`done` after it."""

    def __init__(self, worker_dir: Path):
        worker_dir.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(worker_dir / NAME, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def start(self, data: bytes) -> None:
        os.pwrite(self.fd, HEADER.pack(1, len(data)) + data, 0)

    def done(self) -> None:
        os.pwrite(self.fd, b"\0", 0)


def forget_in_flight(worker_dir: Path) -> None:
    """Clear the record of a worker ended for a reason that is not its input (its next start writes anew)."""
    try:
        with open(worker_dir / NAME, "r+b") as f:
            f.write(b"\0")
    except OSError:
        pass


def died_on(worker_dir: Path) -> bytes | None:
    """The input a dead worker was running (None: it died between inputs, or left no file)."""
    try:
        with open(worker_dir / NAME, "rb") as f:
            head = f.read(HEADER.size)
            if len(head) < HEADER.size:
                return None
            running, length = HEADER.unpack(head)
            data = f.read(length)
    except OSError:
        return None
    return data if running == 1 and len(data) == length else None
