"""The ``gdnfuzz run`` process supervisor: harness worker subprocesses, their output, restarts.

``atheris.Fuzz()`` never returns, so each worker is a harness subprocess; the
supervisor passes the settings through the environment, reads the workers'
libFuzzer status lines and finding lines into a :class:`~fuzz.search.libfuzzer.Progress`,
shows one live progress line, and restarts a worker that died before the time
was up (its last lines are kept in ``crashes/harness-crashes.log``, the input
it died on in ``crashes/raw/``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from fuzz.errors import ExitCode
from fuzz.search.libfuzzer import DEFAULT_FLAGS, Progress, harness_command

RUN_LIMITS = ("-timeout=900", "-rss_limit_mb=16384")  # gdnfuzz run's own (inline minimization is slow)


def _pump(stream: IO[str], worker: int, progress: Progress, log: list[str]) -> None:
    for line in stream:
        progress.feed(worker, line.strip())
        log.append(line)
        del log[:-200]


def corpus_dirs(corpus: Path) -> list[str]:
    """The queue (where libFuzzer adds inputs) first, then the committed seeds and regressions."""
    queue = corpus / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    return [str(queue)] + [str(d) for d in (corpus / "seeds", corpus / "regressions") if d.is_dir()]


def worker_env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "GDNFUZZ_CANDIDATE": args.candidate,
        "GDNFUZZ_REFERENCE": args.reference,
        "GDNFUZZ_CRASHES": str(args.crashes),
        "GDNFUZZ_REGRESSIONS": "" if args.no_regressions else str(Path(args.corpus) / "regressions"),
        "GDNFUZZ_MINIMIZE_SECONDS": str(args.minimize_time),
        "VLLM_LOGGING_LEVEL": "ERROR",
        "GDNFUZZ_TARGET": args.target,
    })
    return env


def run_workers(args: argparse.Namespace, progress: Progress, out: IO[str] = sys.stderr) -> int:
    deadline = time.monotonic() + args.max_time if args.max_time else None
    dirs = corpus_dirs(Path(args.corpus))
    Path(args.crashes).mkdir(parents=True, exist_ok=True)
    procs: dict[int, tuple[subprocess.Popen[str], threading.Thread, list[str]]] = {}
    restarts = 0

    raw = Path(args.crashes) / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    def start(i: int) -> None:
        remaining = int(deadline - time.monotonic()) if deadline else 0
        flags = [*DEFAULT_FLAGS, *RUN_LIMITS, f"-seed={args.seed + i + 1000 * restarts}", f"-artifact_prefix={raw}/"]
        if deadline:
            flags.append(f"-max_total_time={max(remaining, 1)}")
        if args.runs:
            flags.append(f"-runs={args.runs}")
        cmd = harness_command([*flags, *args.libfuzzer, *dirs])
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                env=worker_env(args), cwd=os.getcwd())
        log: list[str] = []
        thread = threading.Thread(target=_pump, args=(proc.stderr, i, progress, log), daemon=True)
        thread.start()
        procs[i] = (proc, thread, log)

    for i in range(args.jobs):
        start(i)
    last_print = 0.0
    while procs:
        time.sleep(0.5)
        for i, (proc, thread, log) in list(procs.items()):
            if proc.poll() is None:
                continue
            thread.join(timeout=5)
            del procs[i]
            time_left = deadline is None or time.monotonic() < deadline - 5
            if proc.returncode != 0:
                progress.worker_crashes += 1
            if proc.returncode != 0 and time_left and not args.runs:
                with open(Path(args.crashes) / "harness-crashes.log", "a") as f:
                    f.write(f"--- worker {i} exited {proc.returncode}\n" + "".join(log[-40:]))
                restarts += 1
                print(f"gdnfuzz: worker {i} exited {proc.returncode}; restarting", file=out)
                start(i)
            elif proc.returncode != 0:
                print("".join(log[-20:]), file=out)
        if time.monotonic() - last_print >= 2 or not procs:
            print(progress.line(), file=out, flush=True)
            last_print = time.monotonic()
    return ExitCode.DIVERGED if progress.findings or progress.worker_crashes else ExitCode.CLEAN
