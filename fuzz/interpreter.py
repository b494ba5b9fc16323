"""The command line of every Python child gdnfuzz starts (harness workers, the reducer, sandbox and
engine children, merge wrappers).

Invariant: a child never puts its working directory (the user's project) ahead of gdnfuzz's own
packages on its import path: it runs with ``-P`` (Python's safe path), so a project holding its own
``fuzz/`` or ``workers/`` package cannot shadow ``fuzz`` or ``workers`` in the child, as the pytest
plugin's replay process (``gdnfuzz_pytest``) keeps it for the plugin. Children still run in the user's
working directory, and ``$PYTHONPATH`` still applies.
"""

from __future__ import annotations

import sys


def python_command(*args: str) -> list[str]:
    """``python -P ARGS...`` with this interpreter: ``python_command("-m", MODULE, ...)`` or ``("-c", CODE)``."""
    return [sys.executable, "-P", *args]
