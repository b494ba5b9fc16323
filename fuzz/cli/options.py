"""Flags several subcommands share, defined once."""

from __future__ import annotations

import argparse
import os

from fuzz.model.policies import Policy, resolve_policy


def add_policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--candidate", default="pre-51113",
                   help="split policy under test (default pre-51113; see `gdnfuzz policies`)")
    p.add_argument("--reference", default="vllm", help="reference split policy (default vllm)")


def add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default=os.environ.get("GDNFUZZ_CORPUS", "corpus"),
                   help="corpus root ($GDNFUZZ_CORPUS): queue/ is written, seeds/ and regressions/ read")
    p.add_argument("--crashes", default=os.environ.get("GDNFUZZ_CRASHES", "crashes"),
                   help="crash store ($GDNFUZZ_CRASHES, default crashes)")


def policies_of(args: argparse.Namespace) -> tuple[Policy, Policy]:
    """The candidate and reference the user named (a bad one raises PolicyError, exit 2)."""
    return resolve_policy(args.candidate), resolve_policy(args.reference)
