"""Whether a store directory can take writes now. Invariant: :func:`store_fault` never writes, never raises, and answers
``None`` or the ``OSError`` a write would meet (``EROFS``, ``EACCES``, ``ENOSPC``, ``ENOENT``), naming the directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path

MIN_FREE_BYTES = 16 * 1024 * 1024  # below this a store counts as full: a bundle or a queue entry may not fit


def store_fault(directory: str | Path) -> OSError | None:
    """``None`` if ``directory`` can take writes now, else the error a write there would meet."""
    path = str(directory)
    try:
        fs = os.statvfs(path)
    except OSError as exc:
        return OSError(exc.errno, exc.strerror, path)
    if fs.f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), path)
    if not os.access(path, os.W_OK | os.X_OK):
        return OSError(errno.EACCES, os.strerror(errno.EACCES), path)
    if fs.f_bavail * fs.f_frsize < MIN_FREE_BYTES:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    return None


def first_fault(directories: list[Path]) -> OSError | None:
    return next((fault for fault in map(store_fault, directories) if fault is not None), None)
