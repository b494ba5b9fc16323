"""libFuzzer plumbing shared by ``gdnfuzz run``, the campaign and the corpus merge: the harness
command, the flags every worker gets, and the parsing of what workers print.

Invariant: the line formats the harness and the reducer print (``*_LINE``) and the libFuzzer
status lines are parsed here only, so the printer and every reader agree.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field

from fuzz.errors import ExitCode
from fuzz.interpreter import python_command
from fuzz.oracle.verdict import exit_code_for
from fuzz.sandbox.tape import TAPE_REFUSED_LINE  # under -v: "gdnfuzz-tape-refused SPEC: why", a refusal a line
from fuzz.store.corpus_merge import MAX_INPUT_BYTES

HARNESS_MODULE = "fuzz.search.harness"
DETECTED_LINE = "gdnfuzz-detected"  # printed when a divergence is seen, before minimizing
FINDING_LINE = "gdnfuzz-finding"  # printed once the finding is saved
FIRST_INPUT_LINE = "gdnfuzz-first-input"  # printed when the harness starts its first input
EXECS_LINE = "gdnfuzz-execs"  # "gdnfuzz-execs N T R": inputs judged so far (after the first, then about once a
# second), and of its sandboxed runs, those answered from their tape and the tapes refused (``fuzz.sandbox.tape``)
PROFILES_LINE = "gdnfuzz-profiles"  # "gdnfuzz-profiles JSON": under the mixture, each profile's figures so far
STARTING_LINE = "gdnfuzz-starting"  # "gdnfuzz-starting WHAT": the harness's start-up phase, before its first input
DONE_PREFIX = "Done "  # libFuzzer's last line when its run count or time is reached ("Done 1000 runs in 9 second(s)")
UNUSABLE_LINE = "gdnfuzz-unusable"  # "gdnfuzz-unusable REASON": a run's bad input (a checkout unfit for the installed vLLM)
SAVED_LINE = "gdnfuzz-saved"  # printed by the reducer once a finding's bundle is minimized and stored
REDUCER_READY_LINE = "gdnfuzz-reducer-ready"  # printed by the reducer once its imports are done
STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+ (?:lim: \d+ )?exec/s: (\d+)")
FINAL_STAT = re.compile(r"stat::(\w+):\s+(\d+)")
# Every harness worker, run or campaign. Run times differ by 100x between inputs (a scenario's steps), so
# the entropic schedule weighs inputs by how fast they run (libFuzzer's own option: up to 30x more
# mutations for the fastest; the price is that a seed no longer fixes the input sequence).
DEFAULT_FLAGS = (f"-max_len={MAX_INPUT_BYTES}", "-print_final_stats=1", "-entropic_scale_per_exec_time=1")


def sum_profiles(figures: list[dict[str, dict[str, float]]],
                 shares_of: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Workers' :data:`PROFILES_LINE` figures summed per profile; ``share`` the mean over ``shares_of``."""
    total: dict[str, dict[str, float]] = {}
    for one in figures:
        for name, f in one.items():
            row = total.setdefault(name, {"execs": 0, "seconds": 0.0, "features": 0, "findings": 0, "share": 0.0})
            for key in ("execs", "seconds", "features", "findings"):
                row[key] += f[key]
    for name, row in total.items():
        shares = [one[name]["share"] for one in shares_of if name in one]
        row["seconds"] = round(row["seconds"], 1)
        row["share"] = round(sum(shares) / len(shares), 3) if shares else 0.0
    return total


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
    """One worker's figures: ``execs`` from its own count (:data:`EXECS_LINE`, live while libFuzzer prints
    nothing, as while it loads the seed corpus) or libFuzzer's, whichever is ahead; the rest from
    libFuzzer's status lines."""

    execs: int = 0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    exec_per_s: int = 0
    first_cov: int | None = None
    profiles: dict[str, dict[str, float]] = field(default_factory=dict)  # under the mixture (:data:`PROFILES_LINE`)
    taped: int = 0  # sandboxed runs answered from their tape
    refused: int = 0  # and tapes refused (each run then made one exchange a call)


@dataclass(frozen=True)
class Totals:
    execs: int
    exec_per_s: float  # since the first verdict
    cov: int
    ft: int
    corpus: int
    taped: int = 0
    refused: int = 0


@dataclass
class Progress:
    """What the workers and the reducer reported so far (updated from their output threads).

    ``findings``: every raw save a worker reported, (seconds, signature, raw bundle), repeats included;
    ``saved``: signature -> (seconds, bundle) once the reducer stored it; ``detected``: signature ->
    seconds to its first detection; ``first_input``: seconds to the first input any worker started;
    ``first_verdict``: seconds to the first input any worker finished judging; ``phases``: each start-up
    phase a worker reported (``STARTING_LINE``), with the seconds it began at.
    """

    started: float = field(default_factory=time.monotonic)
    workers: dict[int, WorkerStats] = field(default_factory=dict)
    findings: list[tuple[float, str, str]] = field(default_factory=list)
    saved: dict[str, tuple[float, str]] = field(default_factory=dict)
    detected: dict[str, float] = field(default_factory=dict)
    first_input: float | None = None
    first_verdict: float | None = None
    phases: list[tuple[float, int, str]] = field(default_factory=list)
    worker_crashes: int = 0  # libFuzzer crashes (their inputs are in crashes/raw/)
    retired: WorkerStats = field(default_factory=WorkerStats)  # the workers that ended (:meth:`retire`), summed
    reducer_ready: bool = False  # the reducer's imports are done (:data:`REDUCER_READY_LINE`)
    stopped: float | None = None  # seconds to the moment the run began to stop (:meth:`stop`)
    interrupted: bool = False  # it stopped on ^C
    unusable: str | None = None  # why a worker stopped on bad input (``UNUSABLE_LINE``): the run ends, exit 2
    lock: threading.Lock = field(default_factory=threading.Lock)
    _announced: set[str] = field(default_factory=set)
    _refusals: list[str] = field(default_factory=list)  # :data:`TAPE_REFUSED_LINE` lines not yet shown

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
            elif line.startswith(REDUCER_READY_LINE):
                self.reducer_ready = True
            elif line.startswith(PROFILES_LINE):
                self.workers.setdefault(worker, WorkerStats()).profiles = json.loads(line.split(maxsplit=1)[1])
            elif line.startswith(EXECS_LINE):
                self.first_verdict = now if self.first_verdict is None else self.first_verdict
                s = self.workers.setdefault(worker, WorkerStats())
                execs, s.taped, s.refused = (int(n) for n in [*line.split()[1:4], 0, 0][:3])
                s.execs = max(s.execs, execs)
            elif line.startswith(TAPE_REFUSED_LINE):
                self._refusals.append(line)
            elif m := STATUS.search(line):
                s = self.workers.setdefault(worker, WorkerStats())
                execs, s.cov, s.ft, s.corpus, s.exec_per_s = map(int, m.groups())
                s.execs = max(s.execs, execs)
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
            lines.extend(self._refusals)
            self._refusals.clear()
            return lines

    def exit_code(self) -> ExitCode:
        """1 if a correctness finding was found or a worker crashed, else 4 if only efficiency findings
        (``efficiency-*`` signatures) were found, else 0."""
        return exit_code_for(self.signatures(), self.worker_crashes > 0)

    def startup(self) -> str:
        """Where start-up went, from the first worker's first start: ``importing ... 6.1s, instrumenting ... 1.5s``
        (a phase of a restart, which begins again, or of one after the first input, is not that start's)."""
        with self.lock:
            first: list[tuple[float, str]] = []
            for t, worker, what in self.phases:
                if worker != self.phases[0][1]:
                    continue
                if any(what == seen for _, seen in first) or (self.first_input is not None and t > self.first_input):
                    break
                first.append((t, what))
            if not first:
                return ""
            ends = [t for t, _ in first[1:]] + [self.first_input]
            return ", ".join([f"interpreter and gdnfuzz {first[0][0]:.1f}s"] + [
                f"{what} {end - t:.1f}s" for (t, what), end in zip(first, ends, strict=True) if end is not None])

    def stop(self, interrupted: bool) -> None:
        """The run begins to stop now: its time was up, its workers ended, or ^C (``interrupted``)."""
        with self.lock:
            self.stopped = time.monotonic() - self.started
            self.interrupted = interrupted

    def fuzzing_seconds(self) -> float:
        """From the first verdict to the stop (or now): the time inputs were run after start-up."""
        with self.lock:
            if self.first_verdict is None:
                return 0.0
            end = self.stopped if self.stopped is not None else time.monotonic() - self.started
            return max(end - self.first_verdict, 0.0)

    def retire(self, worker: int) -> None:
        """A worker ended: its figures stay in the totals, and a restart of it counts from zero again."""
        with self.lock:
            gone = self.workers.pop(worker, None)
            if gone is not None:
                r = self.retired
                r.execs, r.taped, r.refused = r.execs + gone.execs, r.taped + gone.taped, r.refused + gone.refused
                r.cov, r.ft, r.corpus = max(r.cov, gone.cov), max(r.ft, gone.ft), max(r.corpus, gone.corpus)
                r.profiles = sum_profiles([r.profiles, gone.profiles], shares_of=[gone.profiles])

    def totals(self) -> Totals:
        """The run's figures so far: executions summed over its workers, ended ones included; coverage,
        features and corpus the best any reached; executions a second since the first verdict."""
        with self.lock:
            ws = [self.retired, *self.workers.values()]
            execs = sum(w.execs for w in ws)
            fuzzing = None if self.first_verdict is None else time.monotonic() - self.started - self.first_verdict
            return Totals(execs, execs / fuzzing if fuzzing else 0.0, max(w.cov for w in ws), max(w.ft for w in ws),
                          max(w.corpus for w in ws), sum(w.taped for w in ws), sum(w.refused for w in ws))

    def profiles(self) -> dict[str, dict[str, float]]:
        """Under the mixture: per profile, the inputs it made, their seconds, the features and signatures they
        found first (summed over the workers, ended ones included) and its share now (the running workers'
        mean; once none runs, the last one's to end); empty under a pinned profile."""
        with self.lock:
            live = [w.profiles for w in self.workers.values() if w.profiles]
            return sum_profiles([self.retired.profiles, *live], shares_of=live or [self.retired.profiles])

    def status(self) -> str:
        """The status line without its time: the start-up phase until the first input, the first input while
        it is judged (a candidate process may be starting), then the figures."""
        with self.lock:
            if self.first_verdict is None and not self.findings and not self.workers:
                if self.first_input is not None:
                    return "judging the first input"
                if not self.phases:
                    return "starting"
                _, worker, what = self.phases[-1]
                return f"starting: worker {worker} {what}"
            sigs = {sig for _, sig, _ in self.findings}
            repeats = len(self.findings) - len(sigs)
        t = self.totals()
        return (f"execs {t.execs} exec/s {t.exec_per_s:.0f} cov {t.cov} ft {t.ft} corpus {t.corpus} "
                f"signatures {len(sigs)} (repeats {repeats})")

    def line(self) -> str:
        return f"[{time.monotonic() - self.started:6.0f}s] {self.status()}"
