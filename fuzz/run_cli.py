"""``gdnfuzz run``: coverage-guided fuzzing with atheris, in worker subprocesses.

``atheris.Fuzz()`` never returns, so each worker is a ``python -m fuzz.harness``
subprocess; this process passes the settings through the environment, reads
the workers' libFuzzer status lines and finding lines, shows one live progress
line, restarts a worker that died before the time was up (its last lines are
kept in ``crashes/harness-crashes.log``, the input it died on in ``crashes/raw/``),
and exits 1 if any finding was saved or any worker crashed.

libFuzzer flags pass through after ``--`` (``gdnfuzz run -- -max_len=20000``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fuzz import exit_codes
from fuzz.harness import DETECTED_LINE, FINDING_LINE
from fuzz.policies import PolicyError, resolve_policy

STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+ (?:lim: \d+ )?exec/s: (\d+)")
DEFAULT_FLAGS = ("-max_len=16384", "-print_final_stats=1")  # every harness worker, run or campaign
RUN_LIMITS = ("-timeout=900", "-rss_limit_mb=16384")  # gdnfuzz run's own (inline minimisation is slow)


@dataclass
class WorkerStats:
    execs: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    exec_per_s: int = 0
    first_cov: int | None = None


@dataclass
class Progress:
    """What all workers reported so far (updated from their stderr threads)."""

    started: float = field(default_factory=time.monotonic)
    workers: dict[int, WorkerStats] = field(default_factory=dict)
    findings: list[tuple[float, str, str]] = field(default_factory=list)  # (seconds, signature, bundle)
    detected: dict[str, float] = field(default_factory=dict)  # signature -> seconds to first detection
    worker_crashes: int = 0  # libFuzzer crashes (their inputs are in crashes/raw/)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def feed(self, worker: int, line: str) -> None:
        with self.lock:
            if line.startswith(DETECTED_LINE):
                self.detected.setdefault(line.split()[1], time.monotonic() - self.started)
                return
            if line.startswith(FINDING_LINE):
                _, sig, bundle = line.split(maxsplit=2)
                self.findings.append((time.monotonic() - self.started, sig, bundle))
                return
            m = STATUS.search(line)
            if m:
                s = self.workers.setdefault(worker, WorkerStats())
                s.execs, s.cov, s.ft, s.corpus, s.exec_per_s = map(int, m.groups())
                s.first_cov = s.cov if s.first_cov is None else s.first_cov

    def line(self) -> str:
        with self.lock:
            ws = list(self.workers.values())
            sigs = sorted({sig for _, sig, _ in self.findings})
            return (f"[{time.monotonic() - self.started:6.0f}s] execs {sum(w.execs for w in ws)} "
                    f"exec/s {sum(w.exec_per_s for w in ws)} cov {max((w.cov for w in ws), default=0)} "
                    f"ft {max((w.ft for w in ws), default=0)} corpus {max((w.corpus for w in ws), default=0)} "
                    f"findings {len(self.findings)} ({len(sigs)} signatures)")


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
        cmd = [sys.executable, "-m", "fuzz.harness", *flags, *args.libfuzzer, *dirs]
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
    return exit_codes.DIVERGED if progress.findings or progress.worker_crashes else exit_codes.CLEAN


def cmd_run(args: argparse.Namespace) -> int:
    for spec in (args.candidate, args.reference):
        try:
            resolve_policy(spec)
        except PolicyError as exc:
            print(f"gdnfuzz: {exc}", file=sys.stderr)
            return exit_codes.BAD_INPUT
    progress = Progress()
    code = run_workers(args, progress)
    for seconds, sig, bundle in sorted(progress.findings)[:50]:
        print(f"{seconds:8.1f}s  {sig}  {bundle}")
    for sig, seconds in sorted(progress.detected.items(), key=lambda kv: kv[1]):
        print(f"detected {sig} after {seconds:.1f}s")
    return code


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="coverage-guided fuzzing of a candidate split against a reference (atheris)")
    p.add_argument("--target", default="split", choices=("split", "kernels"),
                   help="split: candidate vs reference on the sim tier; kernels: GDN kernel conformance "
                        "(a conformance failure is a libFuzzer crash: the worker stops and keeps the input)")
    p.add_argument("--candidate", default="pre-51113")
    p.add_argument("--reference", default="vllm")
    p.add_argument("--max-time", type=int, default=300, help="seconds (0: no limit)")
    p.add_argument("--runs", type=int, default=0, help="stop each worker after N inputs (0: no limit)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--corpus", default=os.environ.get("GDNFUZZ_CORPUS", "corpus"),
                   help="corpus root ($GDNFUZZ_CORPUS): queue/ is written, seeds/ and regressions/ read")
    p.add_argument("--crashes", default=os.environ.get("GDNFUZZ_CRASHES", "crashes"), help="crash store ($GDNFUZZ_CRASHES)")
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--minimize-time", type=float, default=60.0, help="seconds to minimise each new signature")
    p.add_argument("--no-regressions", action="store_true", help="do not add findings to corpus/regressions")
    p.add_argument("libfuzzer", nargs="*", help="libFuzzer flags, after --")
    p.set_defaults(func=cmd_run)
