"""The one low-level reader of user JSON files: whatever the bytes, a value or one InputError.

Every reader of a user file (scenario and corpus files, bundles and ``verdict.json``, stats lines,
kernel schedules, ``compare`` reports) gets its bytes and its JSON value here, and then checks the
fields it knows. Invariants kept here:

- a file that is missing, a directory, unreadable, larger than ``max_bytes`` or not UTF-8 is refused
  with the file named (field ``<file>``), never an ``OSError`` or ``UnicodeDecodeError``;
- only regular files are read (a link to one is followed): a FIFO, a socket or a device is refused
  without blocking on it, and a file's size is checked before a byte is read (a sparse 1 GB file costs
  nothing); :func:`json_files` lists a directory's regular ``*.json`` files the same way, naming the
  others instead of opening them;
- a value is plain JSON as the format promises: no ``NaN`` / ``Infinity`` (nor a number that only
  parses as infinity), no integer longer than :data:`MAX_INT_DIGITS` digits, no nesting deeper than
  :data:`MAX_DEPTH`, no string that cannot be written back as UTF-8 (a lone surrogate escape), no
  object that names a key twice (JSON leaves it open; Python would keep the last value, silently);
  anything else is refused as field ``<json>`` (a duplicate key named), never a ``ValueError`` or
  ``RecursionError``.

Errors are made by the caller's ``fail(field, message)``, so each reader raises its own
:class:`~fuzz.errors.InputError` subclass, already naming its file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from fuzz.errors import InputError

Fail = Callable[[str, str], InputError]

MAX_FILE_BYTES = 256 << 20  # a kernel schedule of a whole corpus stays far below
MAX_DEPTH = 64  # the deepest gdnfuzz format nests 6 levels
MAX_INT_DIGITS = 20  # every integer field fits in 64 bits


def read_bytes(path: str | Path, fail: Fail, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes; a missing, unreadable, oversized or non-regular file is ``fail("<file>", ...)``."""
    with open_regular(path, fail, max_bytes) as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:  # it grew after its size was checked
        _raise(fail("<file>", f"larger than {max_bytes} bytes"))
    return raw


def read_lines(path: str | Path, fail: Fail, max_bytes: int) -> Iterator[str]:
    """The file's lines (UTF-8, without their line ends), read one at a time: at most ``max_bytes`` of
    the file is ever held (see :func:`open_regular` for the file errors)."""
    with open_regular(path, fail, max_bytes) as f:
        left = max_bytes
        while line := f.readline(left + 1):
            left -= len(line)
            if left < 0:
                _raise(fail("<file>", f"larger than {max_bytes} bytes"))
            yield _decode(line, fail).rstrip("\r\n")


@contextmanager
def open_regular(path: str | Path, fail: Fail, max_bytes: int = MAX_FILE_BYTES) -> Iterator[BinaryIO]:
    """``path`` open for reading, once it is known to be a regular file of at most ``max_bytes`` bytes:
    opened without blocking (a FIFO would wait for a writer) and checked on the open file itself."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        _raise(fail("<file>", "no such file"))
    except PermissionError:
        _raise(fail("<file>", "not readable (permission denied)"))
    except OSError as exc:
        why = "not a regular file (a socket)" if exc.errno == errno.ENXIO else \
            f"cannot be read ({exc.strerror or type(exc).__name__})"
        _raise(fail("<file>", why))
    try:
        _check_open(fd, fail, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        try:
            yield f
        except OSError as exc:
            _raise(fail("<file>", f"cannot be read ({exc.strerror or type(exc).__name__})"))


def _check_open(fd: int, fail: Fail, max_bytes: int) -> None:
    """Refuse the open file ``fd`` unless it is a regular file of at most ``max_bytes`` bytes."""
    status = os.fstat(fd)
    if stat.S_ISDIR(status.st_mode):
        _raise(fail("<file>", "is a directory, not a file"))
    if not stat.S_ISREG(status.st_mode):
        _raise(fail("<file>", f"not a regular file ({_file_kind(status.st_mode)})"))
    if status.st_size > max_bytes:
        _raise(fail("<file>", f"larger than {max_bytes} bytes ({status.st_size} bytes)"))


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def json_files(directory: Path, skipped: Callable[[Path, str], None]) -> list[Path]:
    """The regular ``*.json`` files directly in ``directory`` (links to them followed), sorted; each other
    entry so named (a FIFO, a socket, a device, a directory, a dangling link) goes to ``skipped(path,
    why)`` and is never opened."""
    found = []
    for path in sorted(directory.glob("*.json")):
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            skipped(path, f"cannot be read ({exc.strerror or type(exc).__name__})")
            continue
        if stat.S_ISREG(mode):
            found.append(path)
        else:
            skipped(path, "is a directory, not a file" if stat.S_ISDIR(mode) else
                    f"not a regular file ({_file_kind(mode)})")
    return found


def expand_dirs(paths: list[str], skipped: Callable[[Path, str], None]) -> list[Path]:
    """Each path as given, in order, a directory replaced by the :func:`json_files` of it and of every
    directory under it (a corpus root's ``seeds/`` and ``regressions/``; links to directories are not
    followed), sorted by path; nothing is opened."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            tree = sorted(Path(top) for top, _, _ in os.walk(path))
            found += sorted(file for directory in tree for file in json_files(directory, skipped))
        else:
            found.append(path)
    return found


def read_text(path: str | Path, fail: Fail, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text, which must be UTF-8 (see :func:`read_bytes` for the file errors)."""
    return _decode(read_bytes(path, fail, max_bytes), fail)


def read_json(path: str | Path, fail: Fail, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The JSON value of a file (see the module invariants)."""
    return parse_json(read_bytes(path, fail, max_bytes), fail)


def parse_json(raw: bytes | str, fail: Fail) -> Any:
    """The JSON value of ``raw`` (UTF-8 bytes or text), checked against the module invariants."""
    text = _decode(raw, fail) if isinstance(raw, bytes) else raw
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int, parse_float=_finite_float,
                           object_pairs_hook=_unique_keys)
    except _NotPlainJson as exc:
        _raise(fail("<json>", str(exc)))
    except RecursionError:
        _raise(fail("<json>", f"nested deeper than {MAX_DEPTH} levels"))
    except ValueError as exc:  # json.JSONDecodeError is one
        _raise(fail("<json>", f"not valid JSON ({exc})"))
    _check_tree(value, fail)
    return value


class _NotPlainJson(ValueError):
    """Raised from inside ``json.loads`` by the hooks below."""


def _refuse_constant(name: str) -> NoReturn:
    raise _NotPlainJson(f"{name} is not a JSON number")


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _NotPlainJson(f"an integer of {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _NotPlainJson(f"the key {twice!r} appears twice in one object")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotPlainJson(f"{text[:40]} is too large for a finite number")
    return value


def _decode(raw: bytes, fail: Fail) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _raise(fail("<file>", f"not UTF-8 text (byte {exc.start})"))


def _check_tree(value: Any, fail: Fail) -> None:
    """Depth and string checks, without recursion (so no input can exhaust the stack here)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_string(node, fail)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_DEPTH:
            _raise(fail("<json>", f"nested deeper than {MAX_DEPTH} levels"))
        if isinstance(node, dict):
            for key in node:
                _check_string(key, fail)
            children = node.values()
        else:
            children = node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | str))


def _check_string(text: str, fail: Fail) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        _raise(fail("<json>", f"a string with a lone surrogate escape ({text[:20]!r})"))


def _raise(error: InputError) -> NoReturn:
    raise error from None
