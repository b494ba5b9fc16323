"""The one atomic write: a killed process leaves the old file or the new one, never half of either.

Every file gdnfuzz writes (bundles, corpus entries, ``gen`` output, issue files, the dashboard) goes
through :func:`atomic_write`. Invariants:
- the bytes go to a fresh temporary file in the same directory (created with ``O_EXCL`` and
  ``O_NOFOLLOW``, so nothing planted at its name is followed), are flushed and fsynced, then renamed
  over the target (``os.replace`` is atomic on POSIX), and the directory is fsynced;
- a target that is a symbolic link is refused, so a planted link never redirects a write;
- the file gets the mode a plain ``open(path, "w")`` would (0666 less the umask), so other users of
  a shared cluster mount can read what they are meant to.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from fuzz.errors import InputError


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        raise InputError(f"{path}: refusing to write through a symbolic link")
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path
