"""A child interpreter spoken to in JSON lines over a socket pair, every wait bounded.

Invariants: only JSON crosses (never pickle); every parent read has a deadline, past which the child and all
it started are killed (:class:`ChildTimedOut`); a child that ends or closes its end before answering is
:class:`ChildExited`, saying how it ended; a line over its limit or not a JSON object is :class:`ChildBroken`;
the child's stdout is the parent's stderr (or nowhere: :func:`quiet_children`) and its stdin empty; a child is
contained (``fuzz.sandbox.containment``) and exec'd fresh, or forked from a fork server (or from this
process: :func:`fork_here`) that has the sim tier's imports loaded.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz.interpreter import python_command
from fuzz.sandbox.containment import KILL_ROUNDS_S, keep
from fuzz.tiers import REGISTRY, SCHEDULER_TIER

MAX_LINE = 512 << 20  # the largest answer read (a run's record of a long scenario is a few MiB)
REAP_S = 10.0  # how long a child that closed its end gets to exit before it is killed
ROOT = Path(__file__).resolve().parents[2]
CONTAINED = "fuzz.sandbox.channel"  # ``python -m`` it: an exec'd child, contained (``contained_main``)


_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)  # what crosses is acyclic


def line_of(message: dict[str, Any]) -> bytes:
    """``message`` as the one line of JSON that crosses the channel."""
    return _ENCODER.encode(message).encode() + b"\n"


class ChildFailed(Exception):
    """The child did not answer: ``how`` says what happened, in words that follow "the process ..."."""

    def __init__(self, how: str):
        self.how = how
        super().__init__(how)


class ChildExited(ChildFailed):
    """It ended (or closed its end) before answering."""


class ChildTimedOut(ChildFailed):
    """It did not answer in time and was killed."""


class ChildBroken(ChildFailed):
    """It answered something that is not one JSON object."""


def describe_exit(returncode: int) -> str:
    """How a process ended, in words: ``exited (exit code 3)``, ``was killed by SIGKILL``."""
    if returncode < 0:
        number = -returncode
        name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
        return f"was killed by {name}"
    return f"exited (exit code {returncode})"


class JsonChild:
    """One child running ``MODULE``'s ``main()`` with ``argv`` ``FD ARGS...`` (exec'd, or forked from the fork
    server), contained (``fuzz.sandbox.containment``: a keeper process around it, a scratch directory of its
    own), started on first use and after it is gone; :meth:`call` sends one object and returns the answer."""

    def __init__(self, module: str, args: list[str], start_timeout: float, forked: bool = False):
        self.module, self.args, self.start_timeout, self.forked = module, args, start_timeout, forked
        self.proc: subprocess.Popen[bytes] | ForkedChild | None = None
        self.sock: socket.socket | None = None
        self.scratch: Path | None = None
        self.buffer = b""
        self.ready: dict[str, Any] = {}

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def start(self) -> dict[str, Any]:
        """Start the child (if it is not running) and return its ``ready`` object."""
        if self.alive:
            return self.ready
        self.close()
        ours, theirs = socket.socketpair()
        self.scratch = Path(tempfile.mkdtemp(prefix="gdnfuzz-scratch-"))
        try:
            self.proc = ForkedChild(self.module, theirs, self.args, self.scratch) if self.forked \
                else self._exec(theirs, self.scratch)
        finally:
            theirs.close()
        self.sock, self.buffer = ours, b""
        self.ready = self._read(self.start_timeout, "start")
        return self.ready

    def _exec(self, theirs: socket.socket, scratch: Path) -> subprocess.Popen[bytes]:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return subprocess.Popen(
            python_command("-m", CONTAINED, str(scratch), self.module, str(theirs.fileno()), *self.args),
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL if _quiet else sys.__stderr__.fileno(),
            stderr=subprocess.DEVNULL if _quiet else None, env={**os.environ, "PYTHONPATH": path}, cwd=os.getcwd())

    def call(self, message: dict[str, Any], timeout: float, answer: Asked | None = None) -> dict[str, Any]:
        """Send ``message``; the answer, or :class:`ChildFailed` (the child is then gone). While the child
        asks (``{"ask": ...}`` lines, :func:`serve`'s ``ask``), ``answer`` answers it; ``timeout`` bounds the
        whole exchange."""
        self.start()
        self._send(message)
        return self._answer(time.monotonic() + timeout, timeout, answer)

    def send(self, message: dict[str, Any]) -> None:
        """Start the child if need be and send ``message``, whose answer lines are read with :meth:`read`."""
        self.start()
        self._send(message)

    def _answer(self, due: float, timeout: float, answer: Asked | None) -> dict[str, Any]:
        while True:
            got = self._read(max(due - time.monotonic(), 0.0), "answer", timeout)
            if "ask" not in got or answer is None:
                return got
            self._send({"answered": answer(got["ask"])})

    def read(self, timeout: float, what: str = "answer", limit: int = MAX_LINE) -> dict[str, Any]:
        """The child's next line (at most ``limit`` bytes), waiting up to ``timeout`` (:class:`ChildFailed`
        otherwise): a request whose answer is several lines (an answer tape) is read on with this."""
        return self._read(timeout, what, limit=limit)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.sock is not None
        try:
            self.sock.sendall(line_of(message))
        except OSError:
            raise self._gone() from None

    def _read(self, timeout: float, what: str, bound: float | None = None, limit: int = MAX_LINE) -> dict[str, Any]:
        assert self.sock is not None
        due = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = due - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                self.kill()
                raise ChildTimedOut(f"did not {what} within {bound or timeout:g} s and was killed")
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                raise self._gone()
            self.buffer += chunk
            if len(self.buffer) > limit:
                self.kill()
                raise ChildBroken(f"sent a line over {limit >> 10} KiB and was killed")
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self.kill()
            raise ChildBroken("sent something that is not a JSON object and was killed")
        return answer

    def _gone(self) -> ChildExited:
        """The child closed its end: wait for it (its keeper ends once nothing it started is left; killed if it
        lingers) and say how it ended."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=REAP_S)
            how = describe_exit(code)
        except subprocess.TimeoutExpired:
            self.kill()
            how = "closed its channel and was killed"
        self.close()
        return ChildExited(how)

    def kill(self) -> None:
        """End the child and everything it started (its keeper kills its whole subtree), and forget it."""
        if self.proc is not None and self.proc.poll() is None:
            self._stop(self.proc)
        self.close()

    def close(self) -> None:
        """Close our end; a child still running is asked to stop by EOF, then stopped after :data:`REAP_S`.
        Returns once the child and all it started are gone, its scratch directory removed."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=REAP_S)
            except subprocess.TimeoutExpired:
                self._stop(self.proc)
            self.proc = None
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes] | ForkedChild) -> None:
        """Ask the keeper to end its subtree and itself (SIGTERM), then kill it if it has not within its rounds."""
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=KILL_ROUNDS_S + REAP_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
            proc.wait()


_quiet = False
_fork_here = False
_on_fork: Callable[[], None] | None = None


def fork_here(child_start: Callable[[], None] | None = None) -> None:
    """From now on, fork sandbox children from this process rather than the fork server: for a harness
    worker, which has vLLM's scheduling code imported (and instrumented) before it loads a candidate, so a
    child starts without a second import of vLLM (a fork server's is seconds on a loaded machine). Each
    child runs ``child_start`` first (a worker's: its coverage probes removed)."""
    global _fork_here, _on_fork
    _fork_here, _on_fork = True, child_start


def quiet_children() -> None:
    """From now on, drop what this process's children print (a harness worker's stderr is its supervisor's
    channel: a candidate's lines must never read as the worker's own)."""
    global _quiet
    _quiet = True


# What the fork server imports once, so a forked child starts with it: the sandbox child and what the
# scheduler tier's first run imports (its executor and vLLM's scheduler), by name from the tier registry.
PRELOAD = ["fuzz.sandbox.child", *REGISTRY[SCHEDULER_TIER].preload]


def _forked_main(module: str, channel: socket.socket, args: list[str], env: dict[str, str], cwd: str,
                 scratch: str, quiet: bool) -> None:
    """A forked child's first code: stdin empty (and, ``quiet``, its output dropped), the parent's environment
    and working directory as they are now (the fork server's are from when it started), then ``MODULE``'s
    ``main()`` with the ``argv`` the exec'd child would have, contained (:func:`contained_main`)."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2) if quiet else (0,):
        os.dup2(devnull, target)
    os.close(devnull)
    if _fork_here and _on_fork is not None:
        _on_fork()
    contained_main(module, channel.detach(), args, Path(scratch))


def contained_main(module: str, fd: int, args: list[str], scratch: Path) -> None:
    """This process becomes the keeper of a runner that calls ``MODULE``'s ``main()`` with ``argv``
    ``MODULE FD ARGS...`` (``fuzz.sandbox.containment``); never returns."""

    def run() -> None:
        sys.dont_write_bytecode = True
        sys.argv = [module, str(fd), *args]
        importlib.import_module(module).main()

    keep(run, scratch, close_in_keeper=[fd])


class ForkedChild:
    """A child forked by the fork server (or by this process, :func:`fork_here`), with the slice of
    ``subprocess.Popen`` :class:`JsonChild` uses."""

    def __init__(self, module: str, theirs: socket.socket, args: list[str], scratch: Path):
        context = multiprocessing.get_context("fork" if _fork_here else "forkserver")
        if not _fork_here:
            context.set_forkserver_preload(PRELOAD)
        self.process = context.Process(target=_forked_main, daemon=True, args=(
            module, theirs, args, dict(os.environ), os.getcwd(), str(scratch), _quiet))
        self.process.start()
        self.pid: int = self.process.pid  # type: ignore[assignment]

    def poll(self) -> int | None:
        """The exit code, None while the child runs. This runs before every exchange: the sentinel (readable
        once the child has ended) is checked first, since a fork-server child's own poll sets up a selector."""
        if not select.select([self.process.sentinel], [], [], 0)[0]:
            return None
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(self.process.name, timeout or 0)
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()


Asked = Callable[[Any], Any]  # the parent's answer to what a child asks in the middle of a request
Ask = Callable[[Any], Any]  # the child's side: ask the parent, get its answer
Send = Callable[[dict[str, Any]], None]  # the child's side: one line to the parent, now
Handler = Callable[[dict[str, Any], Ask, Send], dict[str, Any] | None]


def serve(fd: int, ready: Callable[[], dict[str, Any]], handle: Handler) -> None:
    """The child's side: send ``ready()``, then answer each line with ``handle(line, ask, send)`` until EOF (a
    None answer is not sent: the handler sent its lines itself); ``ask(question)`` sends ``{"ask": question}``
    and returns the parent's answer (:meth:`JsonChild.call`).

    The channel is moved off ``fd`` first and stdout is pointed at stderr, so nothing the served code
    prints can be read as an answer by accident."""
    channel = socket.socket(fileno=os.dup(fd))
    os.close(fd)
    os.dup2(2, 1)
    reader = channel.makefile("rb")

    def send(answer: dict[str, Any]) -> None:
        channel.sendall(line_of(answer))

    def ask(question: Any) -> Any:
        send({"ask": question})
        for line in reader:
            got = json.loads(line)
            if "answered" in got:
                return got["answered"]
        raise SystemExit(0)  # the parent is gone

    send(ready())
    for line in reader:
        answer = handle(json.loads(line), ask, send)
        if answer is not None:
            send(answer)


if __name__ == "__main__":  # ``python -m fuzz.sandbox.channel SCRATCH MODULE FD ARGS...``: an exec'd child
    contained_main(sys.argv[2], int(sys.argv[3]), sys.argv[4:], Path(sys.argv[1]))
