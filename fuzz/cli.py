"""The ``gdnfuzz`` command line. One subcommand per job; each lives in its own module.

Exit codes (fuzz.exit_codes), for every subcommand: 0 nothing diverged, 1 a divergence (or a
saved finding), 2 bad input (one line on stderr naming the file and field),
3 the tiers disagree (``replay --tier both``).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz import exit_codes
from fuzz.policies import BUILTINS, Policy, PolicyError, resolve_policy
from fuzz.scenario import ScenarioError, load_scenario, pretty_json


class UsageError(Exception):
    """Bad input the user must fix; printed as one line, exit code 2."""


def _policy(spec: str) -> Policy:
    try:
        return resolve_policy(spec)
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


# ---------------------------------------------------------------- replay


def _load_all(files: list[str]) -> list[tuple[str, Any, dict[str, Any]]]:
    """Validate every file before running any: one bad file fails the whole call, naming it."""
    loaded = []
    for name in files:
        try:
            scenario, annotations = load_scenario(name)
        except ScenarioError as exc:
            raise UsageError(str(exc)) from None
        loaded.append((name, scenario, annotations))
    return loaded


def cmd_replay(args: argparse.Namespace) -> int:
    from fuzz.replay_table import replay_files

    candidate, reference = _policy(args.candidate), _policy(args.reference)
    return replay_files(_load_all(args.files), candidate, reference, args.tier, args.json)


def cmd_gen(args: argparse.Namespace) -> int:
    from fuzz.generate import random_scenario
    from fuzz.store import atomic_write

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    width = len(str(args.count - 1))
    for i in range(args.count):
        scenario = random_scenario(rng)
        atomic_write(out / f"gen-{args.seed}-{i:0{width}d}.json", pretty_json(scenario))
    print(f"wrote {args.count} scenarios to {out}")
    return exit_codes.CLEAN


def cmd_policies(args: argparse.Namespace) -> int:
    for name, (_, description) in BUILTINS.items():
        print(f"{name:<12} {description}")
    print(f"{'module:attr':<12} a function with the split's signature in an importable module")
    print(f"{'file.py:attr':<12} a function with the split's signature in a Python file")
    print(f"{'DIR':<12} a vLLM source checkout: its Scheduler._mamba_block_aligned_split")
    return exit_codes.CLEAN


# ---------------------------------------------------------------- parser


def _add_policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidate", default="pre-51113", help="split policy under test (default pre-51113)")
    p.add_argument("--reference", default="vllm", help="reference split policy (default vllm)")


Registrar = Callable[[Any], None]


def _optional_registrars() -> list[Registrar]:
    """Subcommands of other modules, each adding its own parser (``add_*_parser(subparsers)``)."""
    registrars: list[Registrar] = []
    for module_name, attrs in (
        ("fuzz.run_cli", ("add_run_parser",)),
        ("fuzz.minimize_cli", ("add_minimize_parser",)),
        ("fuzz.confirm", ("add_confirm_parser",)),
        ("fuzz.campaign_cli", ("add_campaign_parser",)),
        ("fuzz.stats", ("add_status_parser",)),
        ("fuzz.dashboard", ("add_dashboard_parser",)),
        ("fuzz.issue_filing", ("add_file_issue_parser",)),
    ):
        try:
            module = __import__(module_name, fromlist=list(attrs))
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        registrars += [getattr(module, a) for a in attrs if hasattr(module, a)]
    return registrars


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gdnfuzz", description="Differential fuzzing of vLLM's Mamba/GDN align-mode chunk split.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("replay", help="replay scenarios under a candidate and a reference policy")
    p.add_argument("files", nargs="+", help="scenario JSON files")
    _add_policy_args(p)
    p.add_argument("--tier", default="sim", choices=("sim", "engine", "kernels", "both"),
                   help="where to run them (both = sim and engine, compared)")
    p.add_argument("--json", action="store_true", help="print one JSON object per scenario")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("gen", help="write random valid scenarios")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_gen)

    p = sub.add_parser("policies", help="list the split policies")
    p.set_defaults(func=cmd_policies)

    for register in _optional_registrars():
        register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"gdnfuzz: {exc}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    except (ScenarioError, PolicyError) as exc:
        print(f"gdnfuzz: {exc}", file=sys.stderr)
        return exit_codes.BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
