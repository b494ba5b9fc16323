"""Atomic file writes: a killed process leaves the old file or the new one, never half of either.

Every file gdnfuzz writes under corpus/ and crashes/ goes through ``atomic_write``:
the bytes go to a temporary file in the same directory, are flushed and
fsynced, then renamed over the target (``os.replace`` is atomic on POSIX).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
