"""How much of the libraries' own output reaches the user, from gdnfuzz's process and every child it starts.

vLLM logs at INFO by default, from every process that imports it (harness workers, the reducer, sandbox
children and their fork server, engine children), prefixed ``(ForkServerProcess-1) INFO ...``, and on
stdout; torch adds ``FutureWarning``s and C++ warnings (``[W... utils.cpp:68] Warning: NUMA binding``).
gdnfuzz's output is its own: tables and JSON on stdout, status lines and errors on stderr.

Invariants, set once per command (``gdnfuzz``, and the pytest plugin's replay process) before anything
imports vLLM, and inherited by every child through the environment:
- at the default verbosity vLLM logs errors only, torch's C++ logging says errors only, and Python's
  ``FutureWarning`` and ``DeprecationWarning`` (the libraries' notices to their own developers) are not
  shown in children; ``-v`` leaves the libraries at their own defaults with vLLM at INFO, ``-vv`` at
  DEBUG; a variable the user exported is kept at the default verbosity;
- vLLM logs to stderr (``VLLM_LOGGING_STREAM``, unless exported), so stdout holds only what gdnfuzz
  prints (``--json`` stays one object a line);
- vLLM configures its logging only when an engine starts; until then its warnings (``Triton is
  installed, but doesn't include CPU backend``, at import) reach stderr through Python's last-resort
  handler whatever ``VLLM_LOGGING_LEVEL`` says. So the level is also put on vLLM's logger itself: here by
  :func:`set_verbosity`, and in a child that imports vLLM where the user sees its stderr (a sandbox
  child and its fork server, an engine child) by :func:`follow_environment`, before vLLM is imported.
"""

from __future__ import annotations

import logging
import os

VLLM_LEVEL_ENV = "VLLM_LOGGING_LEVEL"
VLLM_LEVELS = ("ERROR", "INFO", "DEBUG")  # by -v count: none, -v, -vv
QUIET = {  # what the default verbosity sets, where the user has not
    VLLM_LEVEL_ENV: VLLM_LEVELS[0],
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning",
}
ALWAYS = {"VLLM_LOGGING_STREAM": "ext://sys.stderr"}  # at every verbosity, where the user has not
VERBOSE_ENV = "GDNFUZZ_VERBOSE"  # the count of ``-v``, for this process and its children


def set_verbosity(verbose: int = 0) -> None:
    """Put ``verbose`` (the count of ``-v``) in force here and in every child started after."""
    os.environ[VERBOSE_ENV] = str(verbose)
    for name, value in {**ALWAYS, **({} if verbose else QUIET)}.items():
        os.environ.setdefault(name, value)
    if verbose:
        os.environ[VLLM_LEVEL_ENV] = VLLM_LEVELS[min(verbose, len(VLLM_LEVELS) - 1)]
    follow_environment()


def follow_environment() -> None:
    """Put the vLLM level the environment names (the parent's choice) on vLLM's logger in this process."""
    level = logging.getLevelName(os.environ.get(VLLM_LEVEL_ENV, "INFO").upper())
    logging.getLogger("vllm").setLevel(level if isinstance(level, int) else logging.INFO)


def verbose() -> int:
    """The count of ``-v`` the command was given (0 in a process no command started)."""
    value = os.environ.get(VERBOSE_ENV, "0")
    return int(value) if value.isdigit() else 0
