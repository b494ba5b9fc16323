"""``gdnfuzz policies``: the split policies one can name as ``--candidate`` or ``--reference``."""

from __future__ import annotations

import argparse
from typing import Any

from fuzz.errors import ExitCode
from fuzz.model.policies import BUILTINS
from fuzz.sandbox.containment import describe


def cmd_policies(args: argparse.Namespace) -> int:
    for name, (_, description) in BUILTINS.items():
        print(f"{name:<12} {description}")
    print(f"{'module:attr':<12} a function with the split's signature in an importable module")
    print(f"{'file.py:attr':<12} a function with the split's signature in a Python file")
    print(f"{'DIR':<12} a vLLM source checkout: its Scheduler._mamba_block_aligned_split")
    print(f"{'branch:DIR':<12} a vLLM source checkout's whole scheduling code (sim tier)")
    print(f"the built-ins run in gdnfuzz's process; every other form runs in a sandbox child: {describe()}")
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    sub.add_parser("policies", help="list the split policies").set_defaults(func=cmd_policies)
