"""The input a harness worker is running, kept on disk, so that a worker that dies without a word (a
candidate calling ``os._exit(0)``, a SIGKILL, the kernel's OOM killer) still leaves the input it died on.

Layout of ``<worker raw dir>/.in-flight``: a frame of one flag byte (1 while an input runs, 0 between
inputs), the input's length (8 bytes, little-endian) and its CRC-32 (4 bytes), then the input. Invariants:
the flag is 1 exactly from before the worker starts an input until it has returned from it; each update is
one ``pwrite`` (no fsync: a worker's death is not the machine's); a reader takes an input only where the
frame's length and checksum hold, so a record read while it is rewritten (or with a longer one's stale
tail after it) is never taken for an input.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

NAME = ".in-flight"
HEADER = struct.Struct("<BQI")


class InFlight:
    """The worker's side: :meth:`start` before an input, :meth:`done` after it."""

    def __init__(self, worker_dir: Path):
        worker_dir.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(worker_dir / NAME, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def start(self, data: bytes) -> None:
        os.pwrite(self.fd, HEADER.pack(1, len(data), zlib.crc32(data)) + data, 0)

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
    """The input a dead worker was running (None: it died between inputs, or left no whole record)."""
    try:
        record = (worker_dir / NAME).read_bytes()
    except OSError:
        return None
    if len(record) < HEADER.size:
        return None
    running, length, checksum = HEADER.unpack_from(record)
    data = record[HEADER.size:HEADER.size + length]
    return data if running == 1 and len(data) == length and zlib.crc32(data) == checksum else None
