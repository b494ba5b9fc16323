"""How much of vLLM's own logging reaches the user, in gdnfuzz's process and every child it starts.

vLLM logs at INFO by default, from every process that imports it (harness workers, the reducer, sandbox
children and their fork server, engine children), prefixed ``(ForkServerProcess-1) INFO ...``, and on
stdout. gdnfuzz's output is its own: tables and JSON on stdout, status and errors on stderr.

Invariants, set once per command (``gdnfuzz`` and the pytest plugin's replay process) before anything
imports vLLM, and inherited by every child through the environment:
- at the default verbosity vLLM logs errors only (``VLLM_LOGGING_LEVEL=ERROR``); ``-v`` shows its INFO
  lines, ``-vv`` its DEBUG lines; a level the user exported is kept unless ``-v`` is given;
- vLLM logs to stderr (``VLLM_LOGGING_STREAM``, unless the user exported one), so stdout holds only what
  gdnfuzz prints (``--json`` stays one object a line);
- a process that imported vLLM already (a test calling ``fuzz.cli.main``) gets the same level.
"""

from __future__ import annotations

import logging
import os

LEVEL_ENV = "VLLM_LOGGING_LEVEL"
STREAM_ENV = "VLLM_LOGGING_STREAM"
LEVELS = ("ERROR", "INFO", "DEBUG")  # by -v count: none, -v, -vv


def set_vllm_logging(verbose: int = 0) -> None:
    """Put the level for ``verbose`` (the count of ``-v``) in force here and in every child started after."""
    if verbose or LEVEL_ENV not in os.environ:
        os.environ[LEVEL_ENV] = LEVELS[min(verbose, len(LEVELS) - 1)]
    os.environ.setdefault(STREAM_ENV, "ext://sys.stderr")
    level = logging.getLevelName(os.environ[LEVEL_ENV].upper())
    logging.getLogger("vllm").setLevel(level if isinstance(level, int) else logging.ERROR)
