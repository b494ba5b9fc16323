"""libFuzzer plumbing shared by ``gdnfuzz run``, the campaign and the corpus merge: the harness
command, the flags every worker gets, and the parsing of what workers print.

Invariant: the line formats the harness prints (``DETECTED_LINE``, ``FINDING_LINE``) and the
libFuzzer status lines are parsed here only, so the printer and every reader agree.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import dataclass, field

HARNESS_MODULE = "fuzz.search.harness"
DETECTED_LINE = "gdnfuzz-detected"  # printed when a divergence is seen, before minimizing
FINDING_LINE = "gdnfuzz-finding"  # printed once the finding is saved
STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+ (?:lim: \d+ )?exec/s: (\d+)")
FINAL_STAT = re.compile(r"stat::(\w+):\s+(\d+)")
DEFAULT_FLAGS = ("-max_len=16384", "-print_final_stats=1")  # every harness worker, run or campaign


def harness_command(args: list[str]) -> list[str]:
    """The command line of one atheris harness worker with libFuzzer ``args``."""
    return [sys.executable, "-m", HARNESS_MODULE, *args]


def final_stats(line: str, into: dict[str, int]) -> None:
    """libFuzzer's ``-print_final_stats`` lines (``stat::number_of_executed_units: N``) into ``into``."""
    m = FINAL_STAT.match(line)
    if m:
        into[m.group(1)] = int(m.group(2))


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
