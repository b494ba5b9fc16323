"""The one atomic write, for every file gdnfuzz writes: a killed process leaves the old file or the new one (an
``O_EXCL | O_NOFOLLOW`` temporary, fsynced, renamed over the target, the directory fsynced; no symlink target; the
mode ``open(path, "w")`` gives). Store temporaries are named by :func:`temporary_name` (hidden, ``.tmp``, host, pid),
so :func:`sweep_leftovers` removes a killed writer's (owner gone or older than :data:`LEFTOVER_AGE_S`), never a
live one's."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import time
from pathlib import Path

from fuzz.errors import InputError


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0]) or "host"
LEFTOVER_AGE_S = 3600.0  # a temporary this old is a killed writer's, whoever owned it
OWNED = re.compile(r"\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[0-9a-f]{12}\.tmp$")


def temporary_name(stem: str) -> str:
    """A hidden temporary name for ``stem`` in the same directory, owned by this host and process."""
    return f".{stem}.{HOST}.{os.getpid()}.{secrets.token_hex(6)}.tmp"


def _abandoned(path: Path, now: float) -> bool:
    try:
        if now - path.lstat().st_mtime > LEFTOVER_AGE_S:
            return True
    except OSError:
        return False
    owner = OWNED.search(path.name)
    if owner is None or owner["host"] != HOST:
        return False
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def sweep_leftovers(root: Path) -> list[Path]:
    """Remove the temporaries killed writers left anywhere under ``root`` (module docstring); what was removed."""
    now = time.time()
    removed = []
    for path in sorted(root.rglob(".*.tmp")) if root.is_dir() else ():
        if not _abandoned(path, now):
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            continue  # a store that refuses writes keeps it until it takes them again
        removed.append(path)
    return removed


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        raise InputError(f"{path}: refusing to write through a symbolic link")
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(temporary_name(path.name))
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
