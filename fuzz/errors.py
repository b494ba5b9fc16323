"""Exit codes and the error root: every error a user can meet is a :class:`GdnfuzzError` whose ``exit_code`` the
command exits with, its message one line naming the file and field at fault; only the CLI turns it into an exit."""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    """What every subcommand exits with."""

    CLEAN = 0  # nothing diverged
    DIVERGED = 1  # a divergence, or a saved finding
    BAD_INPUT = 2  # a malformed file, unknown policy, config vLLM rejects: one line on stderr
    TIERS_DISAGREE = 3  # replay --tier both: sim and engine disagree on a scenario
    REGRESSED = 4  # --fail-on efficiency|any: only efficiency findings (lost cache hits, extra passes)
    INFRASTRUCTURE = 5  # something outside the input and the code under test failed: storage, network, git, a node
    INTERRUPTED = 130  # ^C


class GdnfuzzError(Exception):
    """The root: an error with the exit code it stands for."""

    exit_code: ExitCode = ExitCode.DIVERGED


class InputError(GdnfuzzError, ValueError):
    """Bad input the user must fix (a file, a flag, a policy): exit 2."""

    exit_code = ExitCode.BAD_INPUT


class FieldError(InputError):
    """A file whose field is at fault: ``file: field: message``."""

    def __init__(self, field_path: str, message: str, file: str | Path | None = None):
        self.field_path = field_path
        self.message = message
        self.file = None if file is None else str(file)
        where = f"{file}: " if file is not None else ""
        super().__init__(f"{where}{field_path}: {message}")


class ConfigRejected(InputError):
    """vLLM itself refuses these engine knobs, on every tier (unlike an ``unsupported`` run)."""


class ToolError(GdnfuzzError):
    """Something outside the input and the code under test failed (API, subprocess, git, storage, a node): exit 5."""

    exit_code = ExitCode.INFRASTRUCTURE


class StorageError(ToolError):
    """A read or write of gdnfuzz's stores failed: one line with the path, the errno and where the data was kept."""

    def __init__(self, path: str | Path, exc: OSError, kept: str | Path | None = None):
        self.path, self.errno = str(path), exc.errno
        name = errno_name(exc)
        where = f"; kept in {kept}" if kept is not None else ""
        super().__init__(f"{path}: cannot be written ({name}: {exc.strerror or exc}){where}")


def errno_name(exc: OSError) -> str:
    """``EROFS``, ``ENOSPC``, ... for an OSError (its number when the name is unknown)."""
    import errno

    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def exit_code_of(command: Callable[[], int], prog: str) -> int:
    """The exit code of a command line's handler; an error is one line on stderr."""
    try:
        return int(command())
    except GdnfuzzError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
