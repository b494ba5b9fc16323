"""``gdnfuzz schema``: the JSON Schema of a scenario file (the repository's copy: ``docs/scenario.schema.json``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fuzz.errors import ExitCode
from fuzz.model.scenario import scenario_schema_text


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(scenario_schema_text())
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    sub.add_parser("schema", help="print the JSON Schema of a scenario file").set_defaults(func=cmd_schema)
