"""The one low-level reader of user JSON files: whatever the bytes, a value or one ``fail(field, message)``.
Invariants: a missing, unreadable, oversized, non-UTF-8 or non-regular file is refused as ``<file>`` (never opened
blocking); a value is plain JSON (finite numbers, at most :data:`MAX_INT_DIGITS` digits and :data:`MAX_DEPTH` levels,
no lone surrogate, no duplicate key), else ``<json>``; never an OSError, ValueError or RecursionError."""

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
    """The file's UTF-8 lines without line ends, one at a time (at most ``max_bytes`` of it ever held)."""
    with open_regular(path, fail, max_bytes) as f:
        left = max_bytes
        while line := f.readline(left + 1):
            left -= len(line)
            if left < 0:
                _raise(fail("<file>", f"larger than {max_bytes} bytes"))
            yield _decode(line, fail).rstrip("\r\n")


@contextmanager
def open_regular(path: str | Path, fail: Fail, max_bytes: int = MAX_FILE_BYTES) -> Iterator[BinaryIO]:
    """``path`` open for reading once the open file is known regular and at most ``max_bytes`` (opened non-blocking)."""
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
    """The regular ``*.json`` files in ``directory``, sorted; others so named go to ``skipped(path, why)`` unopened."""
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
    """Each path in order, a directory replaced by the sorted :func:`json_files` of its tree; nothing is opened."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            tree = sorted(Path(top) for top, _, _ in os.walk(path))
            found += sorted(file for directory in tree for file in json_files(directory, skipped))
        else:
            found.append(path)
    return found


def read_text(path: str | Path, fail: Fail, max_bytes: int = MAX_FILE_BYTES) -> str:
    return _decode(read_bytes(path, fail, max_bytes), fail)


def read_json(path: str | Path, fail: Fail, max_bytes: int = MAX_FILE_BYTES) -> Any:
    return parse_json(read_bytes(path, fail, max_bytes), fail)


def parse_json(raw: bytes | str, fail: Fail) -> Any:
    """The plain JSON value of ``raw`` (UTF-8 bytes or text)."""
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
