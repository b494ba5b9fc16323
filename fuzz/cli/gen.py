"""``gdnfuzz gen --seed N --count K --out DIR [--profile P]``: K random valid scenarios (null runs, benchmarks)."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_profile_arg
from fuzz.errors import ExitCode
from fuzz.model.scenario import pretty_json
from fuzz.search.mixture import draw_scenario
from fuzz.store.atomic import atomic_write


def cmd_gen(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    width = len(str(args.count - 1))
    for i in range(args.count):
        atomic_write(out / f"gen-{args.seed}-{i:0{width}d}.json", pretty_json(draw_scenario(rng, args.profile)))
    print(f"wrote {args.count} scenarios to {out}")
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("gen", help="write random valid scenarios")
    p.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    p.add_argument("--count", type=int, default=100, help="how many scenarios (default 100)")
    p.add_argument("--out", required=True, help="the directory to write them to")
    add_profile_arg(p)
    p.set_defaults(func=cmd_gen)
