"""libFuzzer plumbing shared by ``gdnfuzz run``, the campaign and the corpus merge: the harness
command, the flags every worker gets, and the parsing of what workers print.

Invariant: the line formats the harness and the reducer print (``*_LINE``) and the libFuzzer
status lines are parsed here only, so the printer and every reader agree.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field

from fuzz.errors import ExitCode
from fuzz.interpreter import python_command
from fuzz.oracle.verdict import exit_code_for
from fuzz.store.corpus_merge import MAX_INPUT_BYTES

HARNESS_MODULE = "fuzz.search.harness"
DETECTED_LINE = "gdnfuzz-detected"  # printed when a divergence is seen, before minimizing
FINDING_LINE = "gdnfuzz-finding"  # printed once the finding is saved
FIRST_INPUT_LINE = "gdnfuzz-first-input"  # printed when the harness starts its first input
STARTING_LINE = "gdnfuzz-starting"  # "gdnfuzz-starting WHAT": the harness's start-up phase, before its first input
DONE_PREFIX = "Done "  # libFuzzer's last line when its run count or time is reached ("Done 1000 runs in 9 second(s)")
UNUSABLE_LINE = "gdnfuzz-unusable"  # "gdnfuzz-unusable REASON": a run's bad input (a checkout unfit for the installed vLLM)
SAVED_LINE = "gdnfuzz-saved"  # printed by the reducer once a finding's bundle is minimized and stored
STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+ (?:lim: \d+ )?exec/s: (\d+)")
FINAL_STAT = re.compile(r"stat::(\w+):\s+(\d+)")
# Every harness worker, run or campaign. Run times differ by 100x between inputs (a scenario's steps), so
# the entropic schedule weighs inputs by how fast they run (libFuzzer's own option: up to 30x more
# mutations for the fastest; the price is that a seed no longer fixes the input sequence).
DEFAULT_FLAGS = (f"-max_len={MAX_INPUT_BYTES}", "-print_final_stats=1", "-entropic_scale_per_exec_time=1")


def harness_command(args: list[str]) -> list[str]:
    """The command line of one atheris harness worker with libFuzzer ``args``."""
    return python_command("-m", HARNESS_MODULE, *args)


def ended_normally(returncode: int, log: list[str]) -> bool:
    """libFuzzer's own end (its time or run count reached): exit 0 after its ``Done N runs`` line. Any
    other end before the supervisor stopped it is a death, whatever the exit code (a split calling
    ``os._exit(0)`` exits 0 without that line)."""
    return returncode == 0 and any(line.startswith(DONE_PREFIX) for line in log[-20:])


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
    """What the workers and the reducer reported so far (updated from their output threads).

    ``findings``: every raw save a worker reported, (seconds, signature, raw bundle), repeats included;
    ``saved``: signature -> (seconds, bundle) once the reducer stored it; ``detected``: signature ->
    seconds to its first detection; ``first_input``: seconds to the first input any worker ran;
    ``phases``: each start-up phase a worker reported (``STARTING_LINE``), with the seconds it began at.
    """

    started: float = field(default_factory=time.monotonic)
    workers: dict[int, WorkerStats] = field(default_factory=dict)
    findings: list[tuple[float, str, str]] = field(default_factory=list)
    saved: dict[str, tuple[float, str]] = field(default_factory=dict)
    detected: dict[str, float] = field(default_factory=dict)
    first_input: float | None = None
    phases: list[tuple[float, int, str]] = field(default_factory=list)
    worker_crashes: int = 0  # libFuzzer crashes (their inputs are in crashes/raw/)
    unusable: str | None = None  # why a worker stopped on bad input (``UNUSABLE_LINE``): the run ends, exit 2
    lock: threading.Lock = field(default_factory=threading.Lock)
    _announced: set[str] = field(default_factory=set)

    def feed(self, worker: int, line: str) -> None:
        now = time.monotonic() - self.started
        with self.lock:
            if line.startswith(FIRST_INPUT_LINE):
                self.first_input = now if self.first_input is None else self.first_input
            elif line.startswith(STARTING_LINE):
                self.phases.append((now, worker, line.removeprefix(STARTING_LINE).strip()))
            elif line.startswith(DETECTED_LINE):
                self.detected.setdefault(line.split()[1], now)
            elif line.startswith(FINDING_LINE):
                _, sig, bundle = line.split(maxsplit=2)
                self.findings.append((now, sig, bundle))
            elif line.startswith(UNUSABLE_LINE):
                self.unusable = self.unusable or line.removeprefix(UNUSABLE_LINE).strip()
            elif line.startswith(SAVED_LINE):
                _, sig, bundle = line.split(maxsplit=2)
                self.saved[sig] = (now, bundle)
            elif m := STATUS.search(line):
                s = self.workers.setdefault(worker, WorkerStats())
                s.execs, s.cov, s.ft, s.corpus, s.exec_per_s = map(int, m.groups())
                s.first_cov = s.cov if s.first_cov is None else s.first_cov

    def signatures(self) -> set[str]:
        with self.lock:
            return {sig for _, sig, _ in self.findings} | set(self.saved)

    def first_raw_bundles(self) -> list[tuple[str, str]]:
        """Each signature with the first raw bundle a worker saved for it, in order of discovery."""
        with self.lock:
            first: dict[str, str] = {}
            for _, sig, bundle in self.findings:
                first.setdefault(sig, bundle)
            return list(first.items())

    def take_announcements(self) -> list[str]:
        """One line per signature, the first time a worker reports it (as libFuzzer prints ``NEW``), never
        again; repeats are counted in the status line."""
        with self.lock:
            lines = []
            for seconds, sig, bundle in self.findings:
                if sig not in self._announced:
                    self._announced.add(sig)
                    lines.append(f"{seconds:8.1f}s  new {sig}  (raw: {bundle}; minimizing beside the fuzzer)")
            return lines

    def exit_code(self) -> ExitCode:
        """1 if a correctness finding was found or a worker crashed, else 4 if only efficiency findings
        (``efficiency-*`` signatures) were found, else 0."""
        return exit_code_for(self.signatures(), self.worker_crashes > 0)

    def startup(self) -> str:
        """Where start-up went, from the first worker's phases: ``importing ... 6.1s, instrumenting ... 1.5s``."""
        with self.lock:
            first = [(t, what) for t, worker, what in self.phases if worker == self.phases[0][1]] if self.phases else []
            if not first:
                return ""
            ends = [t for t, _ in first[1:]] + [self.first_input]
            return ", ".join([f"interpreter and gdnfuzz {first[0][0]:.1f}s"] + [
                f"{what} {end - t:.1f}s" for (t, what), end in zip(first, ends, strict=True) if end is not None])

    def line(self) -> str:
        with self.lock:
            if self.first_input is None and self.phases:
                seconds, worker, what = self.phases[-1]
                now = time.monotonic() - self.started
                return f"[{now:6.0f}s] starting: worker {worker} {what} (for {now - seconds:.0f}s)"
            ws = list(self.workers.values())
            sigs = {sig for _, sig, _ in self.findings}
            return (f"[{time.monotonic() - self.started:6.0f}s] execs {sum(w.execs for w in ws)} "
                    f"exec/s {sum(w.exec_per_s for w in ws)} cov {max((w.cov for w in ws), default=0)} "
                    f"ft {max((w.ft for w in ws), default=0)} corpus {max((w.corpus for w in ws), default=0)} "
                    f"signatures {len(sigs)} (repeats {len(self.findings) - len(sigs)})")
