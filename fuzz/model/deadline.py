"""The per-scenario deadline: a run that takes longer is a ``hang`` fault, never a hung gdnfuzz.
Invariants: :class:`DeadlineExceeded` (a BaseException) is raised in the main thread by one watchdog's signal (never
SIGALRM: libFuzzer's), a late signal ignored; deadlines do not nest; the length is ``--deadline``, else
``$GDNFUZZ_DEADLINE_S``, else the tier's; after :func:`exit_when_stuck`, a run ignoring it ends the process."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fuzz.errors import InputError

DEADLINE_ENV = "GDNFUZZ_DEADLINE_S"
DEFAULT_DEADLINE_S = 120.0  # sim and kernel tiers; a sim run of the largest valid scenario takes seconds
DEADLINE_SIGNAL = signal.SIGRTMIN + 3  # unused by libFuzzer, Python and vLLM
TICK_S = 0.25  # the watchdog's longest sleep
# After the interrupt: how long a run may take to leave its block (exit_when_stuck). Longer than the one
# teardown gdnfuzz itself does on the way out, a sandbox child's (``fuzz.sandbox.channel``: the keeper's kill
# rounds, then the reap, 20 s at most): a loaded machine's slow teardown is not the code under test stuck.
STUCK_GRACE_S = 30.0
STUCK_EXIT = 86  # the exit code of a process ended by exit_when_stuck
STUCK_LINE = "gdnfuzz-stuck"  # the line it prints before it ends


class DeadlineExceeded(BaseException):
    """The armed deadline passed (raised in the main thread, inside whatever it was running)."""


class _Armed:
    """This process's one armed deadline; each arming is a new generation, so an old expiry never ends a later run."""

    active = False
    generation = 0
    expired_generation = -1
    handler_installed = False
    due = math.inf  # monotonic time the armed generation expires at
    inside = False  # the armed generation's block has not been left yet (set even after the interrupt)
    exit_when_stuck = False
    wake = threading.Condition()
    watchdog_pid = 0  # the process whose watchdog is running (a forked child starts its own)


def _watch(main: int) -> None:
    """The watchdog thread: signals the main thread when a generation's deadline passes, at most ``TICK_S`` late."""
    stuck_at = math.inf  # when the interrupted generation is stuck, if it is still inside its block then
    with _Armed.wake:
        while True:
            generation, due = _Armed.generation, _Armed.due
            now = time.monotonic()
            left = due - now
            if _Armed.active and left <= 0:
                _Armed.expired_generation = generation
                _Armed.due = math.inf
                stuck_at = now + STUCK_GRACE_S
                signal.pthread_kill(main, DEADLINE_SIGNAL)
                continue
            if _Armed.exit_when_stuck and _Armed.inside and _Armed.expired_generation == generation \
                    and now >= stuck_at:
                _end_stuck()
            _Armed.wake.wait(min(left, TICK_S))


def _end_stuck() -> None:
    os.write(2, f"\n{STUCK_LINE} the run did not stop {STUCK_GRACE_S:g} s after its deadline's interrupt "
                f"(the code under test caught it); ending this process\n".encode())
    os._exit(STUCK_EXIT)


def exit_when_stuck() -> None:
    """From now on, end this process (:data:`STUCK_EXIT`) when a run ignores its deadline's interrupt."""
    _Armed.exit_when_stuck = True


def set_deadline(seconds: float) -> None:
    """Set this process's (and its children's) per-scenario deadline, as ``--deadline`` does."""
    os.environ[DEADLINE_ENV] = repr(check_deadline(seconds, "--deadline"))


def check_deadline(seconds: float, where: str) -> float:
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds > 0):
        raise InputError(f"{where}: expected a positive number of seconds, got {seconds!r}")
    return float(seconds)


def seconds_from_env(name: str, default: float, most: float = math.inf) -> float:
    """``$name`` as seconds above 0 and at most ``most`` (an InputError naming it otherwise), or ``default``."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= most:
        bound = f" up to {most:g}" if math.isfinite(most) else ""
        raise InputError(f"${name}: expected a positive number of seconds{bound}, got {raw!r}")
    return value


def deadline_seconds(default: float = DEFAULT_DEADLINE_S) -> float:
    """The per-scenario deadline in force: ``$GDNFUZZ_DEADLINE_S``, else ``default``."""
    return seconds_from_env(DEADLINE_ENV, default)


def _on_signal(signum: int, frame: object) -> None:
    if _Armed.active and _Armed.expired_generation == _Armed.generation:
        _Armed.active = False
        raise DeadlineExceeded


@contextmanager
def run_deadline(seconds: float | None = None) -> Iterator[bool]:
    """Arm the deadline (``seconds``, default :func:`deadline_seconds`) around one run; yields whether it armed."""
    if _Armed.active or threading.current_thread() is not threading.main_thread():
        yield False
        return
    if not _Armed.handler_installed:
        signal.signal(DEADLINE_SIGNAL, _on_signal)
        _Armed.handler_installed = True
    if _Armed.watchdog_pid != os.getpid():
        main = threading.main_thread().ident
        assert main is not None
        _Armed.wake = threading.Condition()
        _Armed.watchdog_pid = os.getpid()
        threading.Thread(target=_watch, args=(main,), name="gdnfuzz-deadline", daemon=True).start()
    length = deadline_seconds() if seconds is None else seconds
    with _Armed.wake:
        _Armed.generation += 1
        _Armed.due = time.monotonic() + length
        _Armed.active = True
        _Armed.inside = True
        if length < TICK_S:
            _Armed.wake.notify()
    try:
        yield True
    finally:
        with _Armed.wake:
            _Armed.active = False
            _Armed.inside = False
            _Armed.due = math.inf
