"""Hostile candidates: a split that calls ``os._exit(0)`` or loops while swallowing every exception, in its
body, in a default argument or at import; as a policy file or as a vLLM checkout (issue 24's cases)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from checkout_fixtures import make_checkout, replace_split

SIGNATURE = "(self, request, num_new_tokens, num_new_local_computed_tokens=0, num_external_computed_tokens=0"
EXITS = "__import__('os')._exit(0)"
# A loop the in-process deadline cannot end: it swallows DeadlineExceeded with everything else.
SWALLOWS = "exec('while True:\\n try: __import__(\"time\").sleep(0.01)\\n except BaseException: pass')"


def split_source(name: str, act: str, where: str) -> str:
    """A split named ``name`` that does ``act`` in its body, in a default argument, or at import."""
    if where == "body":
        return f"def {name}{SIGNATURE}):\n    {act}\n    return num_new_tokens\n"
    if where == "default":
        return f"def {name}{SIGNATURE}, _hostile={act}):\n    return num_new_tokens\n"
    return f"{act}\ndef {name}{SIGNATURE}):\n    return num_new_tokens\n"


def hostile_file(directory: Path, act: str, where: str) -> str:
    """A policy file ``hostile_<where>.py`` in ``directory``; its spec."""
    path = directory / f"hostile_{where}.py"
    path.write_text(split_source("split", act, where))
    return f"{path}:split"


def hostile_checkout(root: Path, act: str, where: str) -> Path:
    """A checkout of the installed vLLM's files whose split is the hostile one."""
    make_checkout(root)
    replace_split(root, textwrap.indent(split_source("_mamba_block_aligned_split", act, where), "    "))
    return root
