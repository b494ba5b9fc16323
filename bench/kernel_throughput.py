"""Kernel tier throughput: scenarios/s per available backend, and kernel time vs the state-traffic bound.

Replays a schedule file (default: bench/kernel_schedule.json, the regression corpus
under pre-51113 and vllm, made by ``python -m workers.kernels schedule``) on each
backend and prints, per backend: scenarios/s (whole replay, one-shot oracle runs
included), kernel seconds, the bytes of recurrent state the kernels read and wrote,
and the time those bytes need at the device's copy bandwidth (measured here with a
large device-to-device copy), i.e. how far the kernels are from state-bandwidth bound.
For a backend run by Triton's interpreter (``triton-interpret``, ``triton-interpret-fla``;
not in the default list, they are slow) it also prints the interpreter's cost per kernel:
launches, seconds and milliseconds per launch.

    .venv/bin/python bench/kernel_throughput.py [--backends torch,vllm-cpu] [--limit N] [--out DIR]
    .venv/bin/python bench/kernel_throughput.py --backends triton-interpret --limit 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.kernels.backends import BACKENDS  # noqa: E402
from workers.kernels.executor import KernelExecutor  # noqa: E402
from workers.kernels.schedule import read_schedule  # noqa: E402

DEFAULT_SCHEDULE = Path(__file__).resolve().parent / "kernel_schedule.json"


def copy_bandwidth(device: str, mib: int = 256, repeats: int = 5) -> float:
    """Bytes/s of a large ``copy_`` on ``device`` (read + write counted)."""
    src = torch.empty(mib << 18, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def bench_backend(name: str, entries, repeats: int) -> dict:
    executor = KernelExecutor(name)
    per_kernel = getattr(executor.backend, "kernel_seconds", None)  # interpreter backends: launches, seconds
    if per_kernel is None:
        executor.replay(entries[0])  # warm-up: kernel compilation, allocator (the interpreter compiles nothing)
    kernel_s = moved = calls = 0.0
    t0 = time.perf_counter()
    tokens = 0
    for _ in range(repeats):
        for entry in entries:
            report = executor.replay(entry)
            tokens += sum(c.num_tokens for step in entry.result.steps for c in step.chunks)
            kernel_s += report.kernel_seconds
            moved += report.state_bytes_moved
            calls += report.kernel_calls
    wall = time.perf_counter() - t0
    bandwidth = copy_bandwidth(executor.device)
    bound = moved / bandwidth
    return {
        "backend": name,
        "device": executor.device,
        "scenarios": len(entries) * repeats,
        "scenarios_per_s": len(entries) * repeats / wall,
        "wall_s": wall,
        "kernel_s": kernel_s,
        "kernel_calls": int(calls),
        "state_bytes_moved": int(moved),
        "copy_bandwidth_gbps": bandwidth / 1e9,
        "state_bandwidth_bound_s": bound,
        "kernel_time_over_bound": kernel_s / bound if bound else None,
        "tokens": int(tokens),
        "per_kernel": {kernel: {"launches": int(n), "seconds": t, "ms_per_launch": 1e3 * t / n if n else None}
                       for kernel, (n, t) in (per_kernel or {}).items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", default=str(DEFAULT_SCHEDULE))
    parser.add_argument("--backends", default=",".join(n for n, cls in BACKENDS.items()
                                                       if not n.startswith("triton-interpret") and cls.available()))
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N entries")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", help="directory for kernel_throughput.json")
    args = parser.parse_args(argv)
    entries = read_schedule(args.schedule)
    entries = entries[: args.limit] if args.limit else entries
    rows = []
    for name in [n for n in args.backends.split(",") if n]:
        if not BACKENDS[name].available():
            print(f"{name:<16} unavailable: {BACKENDS[name].unavailable_reason()}")
            continue
        row = bench_backend(name, entries, args.repeats)
        rows.append(row)
        print(
            f"{name:<16} {row['scenarios_per_s']:8.2f} scenarios/s  kernel {row['kernel_s']:7.2f} s "
            f"of {row['wall_s']:7.2f} s wall, {row['kernel_calls']} calls; states moved "
            f"{row['state_bytes_moved'] / 1e6:.1f} MB = {row['state_bandwidth_bound_s'] * 1e3:.3f} ms at "
            f"{row['copy_bandwidth_gbps']:.1f} GB/s ({row['kernel_time_over_bound']:.0f}x the bound)"
        )
        if row["per_kernel"]:
            print(f"  under Triton's interpreter, per kernel ({row['tokens']} scheduled tokens replayed, "
                  f"one-shot oracle runs on top):")
            print(f"  {'kernel':<50} {'launches':>8} {'seconds':>9} {'ms/launch':>10}")
            for kernel, k in sorted(row["per_kernel"].items(), key=lambda kv: -kv[1]["seconds"]):
                print(f"  {kernel:<50} {k['launches']:>8} {k['seconds']:>9.2f} {k['ms_per_launch']:>10.1f}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "kernel_throughput.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
