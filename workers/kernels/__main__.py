"""``python -m workers.kernels``: make schedule files (needs vLLM), replay them (needs only torch), check backends.

Subcommands: schedule, replay, conformance, backends, interpreter. Exit codes as gdnfuzz's: 0 clean, 1 divergence
(conformance failure), 2 bad input, 3 the kernel tier disagrees with the sim tier on which requests resumed badly."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fuzz.errors import ExitCode, exit_code_of
from fuzz.model.deadline import DEADLINE_ENV, set_deadline
from workers.kernels.backends import BackendUnavailable, backend_status, get_backend
from workers.kernels.conformance import check_conformance, decode_case
from workers.kernels.executor import KernelExecutor, KernelReport
from workers.kernels.schedule import ScheduleEntry, read_schedule, write_schedule


def cmd_schedule(args: argparse.Namespace) -> int:
    from fuzz.model.policies import resolve_policy  # noqa: PLC0415 - vLLM only here
    from fuzz.model.scenario import load_scenario  # noqa: PLC0415
    from fuzz.sandbox.scope import ambient  # noqa: PLC0415
    from workers.kernels.executor import simulate  # noqa: PLC0415

    ambient()  # a policy named by path loads and answers in a sandbox child

    policies = [resolve_policy(p) for p in args.policies.split(",")]
    entries = []
    for name in args.files:
        scenario, _ = load_scenario(name)
        for policy in policies:
            entry = simulate(scenario, policy)
            entry.source = name
            entries.append(entry)
    write_schedule(args.out, entries)
    print(f"wrote {len(entries)} sim runs to {args.out}")
    return ExitCode.CLEAN


def sim_bad_resumes(entry: ScheduleEntry) -> set[str]:
    """Requests the sim tier saw resume from a state that is not their prefix."""
    return {rid for rid, o in entry.result.requests.items() if o.resumed and o.resume_state_ok is False}


def replay_rows(entries: list[ScheduleEntry], executor: KernelExecutor) -> list[dict[str, Any]]:
    """One row per (scenario, policy): kernel divergences and wrong slots, and whether they match the sim tier's
    (every slot the sim names is wrong on the kernels, every checkpoint the export kernel wrote is right)."""
    rows = []
    for entry in entries:
        t0 = time.perf_counter()
        report: KernelReport = executor.replay(entry)
        wall = time.perf_counter() - t0
        kernel_bad = {d.request_id for d in report.diverging()}
        sim_poisoned = sorted([p.step, p.block_id] for p in entry.result.poisoned)
        wrong = report.wrong_slots()
        kernel_poisoned = sorted([c.step, c.block] for c in wrong if c.kind == "poisoned")
        agrees = (report.hang_step is None and kernel_bad == sim_bad_resumes(entry) and kernel_poisoned == sim_poisoned
                  and len(kernel_poisoned) == len(wrong))
        status = "diverged" if kernel_bad or wrong else "clean"
        if report.unsupported or report.hang_step is not None:  # a hang shows nothing to compare: not agreement
            status = "unsupported" if report.unsupported else "hang"
        rows.append({
            "source": entry.source,
            "policy": entry.result.policy,
            "status": status,
            "sim_bad_resumes": sorted(sim_bad_resumes(entry)),
            "kernel_diverging": sorted(kernel_bad),
            "sim_poisoned": [] if report.unsupported else sim_poisoned,
            "kernel_poisoned": kernel_poisoned,
            "agrees_with_sim": report.unsupported is not None or agrees,
            "tolerance": report.tolerance,
            "requests": {rid: {"hit_tokens": d.hit_tokens, "divergence": d.divergence, "positions": d.positions,
                               "first_bad": d.first_bad} for rid, d in sorted(report.requests.items())},
            "slots": [asdict(c) for c in report.slots],
            "canary_block": report.canary_block,
            "kernel_seconds": report.kernel_seconds,
            "wall_seconds": wall,
            "state_bytes_moved": report.state_bytes_moved,
            "note": report.unsupported or (None if report.hang_step is None else
                                           f"passed the {executor.deadline():g} s deadline in step {report.hang_step}"),
        })  # fmt: skip
    return rows


def _slot_summary(row: dict[str, Any]) -> str:
    """``wrong/named`` poisoned slots and ``right/written`` checkpoints."""
    named = [c for c in row["slots"] if c["kind"] == "poisoned"]
    written = [c for c in row["slots"] if c["kind"] == "checkpoint"]
    wrong = sum(not c["error"] <= row["tolerance"] for c in named)
    right = sum(c["error"] <= row["tolerance"] for c in written)
    return f"{wrong}/{len(named)}" + (f" ckpt {right}/{len(written)}" if written else "")


def print_table(rows: list[dict[str, Any]], backend: str) -> None:
    print(f"kernel tier, backend {backend}")
    print(f"{'scenario':<44} {'policy':<10} {'status':<11} {'worst resumed':>13} {'worst other':>11} {'tol':>7} "
          f"{'poisoned':>16}  sim")
    for row in rows:
        resumed = [r["divergence"] for r in row["requests"].values() if r["hit_tokens"] > 0]
        other = [r["divergence"] for r in row["requests"].values() if r["hit_tokens"] == 0]
        print(
            f"{Path(row['source']).stem[:44]:<44} {row['policy']:<10} {row['status']:<11} "
            f"{max(resumed, default=0):>13.3g} {max(other, default=0):>11.3g} {row['tolerance']:>7.0e} "
            f"{_slot_summary(row):>16}  {'agrees' if row['agrees_with_sim'] else 'DISAGREES'}"
        )


def cmd_replay(args: argparse.Namespace) -> int:
    if args.deadline is not None:
        set_deadline(args.deadline)  # a bad value: one line, exit 2
    entries = read_schedule(args.schedule)
    entries = [e for e in entries if not args.match or any(m in e.source for m in args.match)]
    entries = entries[: args.limit] if args.limit else entries
    executor = KernelExecutor(args.backend, canary_shift=args.canary)
    rows = replay_rows(entries, executor)
    print_table(rows, executor.backend.name)
    for note in [*(f"{Path(r['source']).stem} {r['policy']}: {r['note']}" for r in rows if r["status"] == "hang"),
                 *executor.backend.notes()]:
        print(f"note: {note}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"kernel_replay_{executor.backend.name}.json").write_text(json.dumps(rows, indent=1) + "\n")
    if not all(r["agrees_with_sim"] for r in rows) and not args.canary:
        return ExitCode.TIERS_DISAGREE
    return ExitCode.DIVERGED if any(r["status"] == "diverged" for r in rows) else ExitCode.CLEAN


def cmd_conformance(args: argparse.Namespace) -> int:
    backend = get_backend(args.backend)
    worst: dict[str, float] = {}
    failed = 0
    for i in range(args.cases):
        report = check_conformance(backend, decode_case(random.Random(i).randbytes(32)))
        failed += bool(report.failures())
        for check, err in report.errors.items():
            worst[check] = max(worst.get(check, 0.0), err)
    print(f"conformance of {backend.name} over {args.cases} cases (tolerance {backend.tolerance:g}): {failed} failed")
    for check, err in worst.items():
        print(f"  {check:<22} worst {err:.3g}")
    for note in backend.notes():
        print(f"note: {note}")
    return ExitCode.DIVERGED if failed else ExitCode.CLEAN


def cmd_backends(args: argparse.Namespace) -> int:
    for name, reason in backend_status().items():
        print(f"{name:<16} {'available' if reason is None else 'unavailable: ' + reason}")
    return ExitCode.CLEAN


def cmd_interpreter(args: argparse.Namespace) -> int:
    """Every entry point under every workaround, then without each one: which kernels run here."""
    from workers.kernels.probe import workaround_table  # noqa: PLC0415 - imports vLLM
    from workers.triton_interpret import unavailable_reason  # noqa: PLC0415

    reason = unavailable_reason()
    if reason:
        raise BackendUnavailable(f"triton-interpret: {reason}")
    failed = False
    for setting, results in workaround_table().items():
        print(setting)
        for name, result in results.items():
            status = "runs" if result.failure is None else f"FAILS in {result.failure.describe()}"
            launches = len(result.launched)
            print(f"  {name:<34} {status} ({launches} kernel launch{'' if launches == 1 else 'es'})")
            failed |= setting == "all" and result.failure is not None
    return ExitCode.DIVERGED if failed else ExitCode.CLEAN


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workers.kernels", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("schedule", help="run scenarios on the sim tier and write a schedule file (needs vLLM)")
    p.add_argument("files", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--policies", default="pre-51113,vllm")
    p.set_defaults(func=cmd_schedule)
    p = sub.add_parser("replay", help="replay a schedule file on a kernel backend (needs only torch)")
    p.add_argument("--schedule", required=True)
    p.add_argument("--backend", default="auto")
    p.add_argument("--out", help="directory for kernel_replay_<backend>.json")
    p.add_argument("--canary", type=int, default=0, help="corrupt the first resume slot to hold N tokens less")
    p.add_argument("--deadline", type=float, metavar="S",
                   help=f"seconds one entry's replay may take (default ${DEADLINE_ENV}, else the backend's: "
                   "120, 3600 under Triton's interpreter)")
    p.add_argument("--limit", type=int, default=0, help="replay only the first N entries")
    p.add_argument("--match", action="append", default=[], metavar="TEXT",
                   help="replay only entries whose source contains TEXT (repeatable: any of them)")
    p.set_defaults(func=cmd_replay)
    p = sub.add_parser("conformance", help="backend vs float64 reference on fuzzed chunkings")
    p.add_argument("--backend", default="auto")
    p.add_argument("--cases", type=int, default=10)
    p.set_defaults(func=cmd_conformance)
    p = sub.add_parser("backends", help="which backends run here")
    p.set_defaults(func=cmd_backends)
    p = sub.add_parser("interpreter", help="which of vLLM's Triton kernels run under Triton's interpreter, and "
                       "which workaround each needs")
    p.set_defaults(func=cmd_interpreter)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return exit_code_of(lambda: args.func(args), "workers.kernels")


if __name__ == "__main__":
    sys.exit(main())
