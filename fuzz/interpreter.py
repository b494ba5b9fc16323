"""The command line of every Python child gdnfuzz starts: ``-P``, so the cwd never shadows gdnfuzz's packages."""

from __future__ import annotations

import sys


def python_command(*args: str) -> list[str]:
    """``python -P ARGS...`` with this interpreter."""
    return [sys.executable, "-P", *args]
