"""A child interpreter spoken to in JSON lines over a socket pair, where every wait has a bound.

The parent side is :class:`JsonChild`; the child side is :func:`serve`. What crosses is JSON only
(never pickle: the child runs code the parent does not trust, and unpickling what it sends could run
anything in the parent).

Invariants:
- every read by the parent has a deadline (``start_timeout`` for the child's ``ready`` line, the
  caller's timeout for each exchange); a child that passes it is ended with everything it started
  and :class:`ChildTimedOut` says so;
- a child that closes its end or exits before answering is waited for and :class:`ChildExited` describes
  how it ended (``exit code 0``, ``killed by SIGKILL``); the parent never takes a missing answer for
  a good one;
- an answer is one line of at most :data:`MAX_LINE` bytes that decodes to a JSON object; anything else
  is :class:`ChildBroken`; a child may ask the parent questions in the middle of a request
  (``{"ask": ...}``), which the caller's ``answer`` answers, within the same bound;
- requests may also be sent without waiting (:meth:`JsonChild.send`) and their answers read later
  (:meth:`JsonChild.ready_answers`, :meth:`JsonChild.read`): the child answers in the order it was asked;
- the child's stdout is the parent's stderr (what the code it runs prints never mixes with the
  parent's output), or nowhere in a process whose stderr is read by another (:func:`quiet_children`), and
  its stdin is empty;
- a child is contained (``fuzz.sandbox.containment``): a keeper in a session of its own runs it in a
  restricted runner, with a scratch directory of its own; stopping a child (:meth:`JsonChild.close`,
  :meth:`JsonChild.kill`) returns only once the keeper has killed everything the child started (a
  ``setsid`` daemon included) and ended, and the scratch directory is removed;
- a child is either a fresh interpreter (``python -m fuzz.sandbox.channel ... MODULE``: nothing imported
  before the module decides but gdnfuzz's own model, as whole-branch mode needs) or, with ``forked=True``,
  forked from this process's multiprocessing fork server that has :data:`PRELOAD` (vLLM's scheduler among
  it) imported already: the same program, without one vLLM import per child; in a process that has
  vLLM's scheduling code imported already and starts no threads of its own before it (a harness
  worker, :func:`fork_here`), forked from the process itself, without even the fork server's import.
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

    def resume(self, question: Any, timeout: float, answer: Asked) -> dict[str, Any]:
        """Answer ``question``, which the child asked in the middle of a request and waits on, and go on as
        :meth:`call` does."""
        self._send({"answered": answer(question)})
        return self._answer(time.monotonic() + timeout, timeout, answer)

    def _answer(self, due: float, timeout: float, answer: Asked | None) -> dict[str, Any]:
        while True:
            got = self._read(max(due - time.monotonic(), 0.0), "answer", timeout)
            if "ask" not in got or answer is None:
                return got
            self._send({"answered": answer(got["ask"])})

    def send(self, *messages: dict[str, Any]) -> None:
        """Send ``messages`` without waiting for anything back (speculative calls: ``fuzz.sandbox.speculation``,
        which keeps few enough in flight that this never blocks). Where the child is gone nothing is sent: reading
        its answers says how it ended, after the answers it sent before (no other child is started in its place:
        that is :meth:`start`'s, before the first)."""
        assert self.sock is not None
        with contextlib.suppress(OSError):
            self.sock.sendall(b"".join(map(line_of, messages)))

    def ready_answers(self) -> list[dict[str, Any]]:
        """Every whole answer the child has sent that is here now, without waiting; :class:`ChildFailed` where
        none is and the child is gone (or it sent garbage)."""
        assert self.sock is not None
        ended = False
        while not ended and select.select([self.sock], [], [], 0)[0]:
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            ended = not chunk
            self.buffer += chunk
        answers = []
        while b"\n" in self.buffer:
            answers.append(self._read(0.0, "answer"))
        if ended and not answers:
            raise self._gone()
        return answers

    def read(self, timeout: float, what: str = "answer") -> dict[str, Any]:
        """The child's next answer, waiting up to ``timeout`` (:class:`ChildFailed` otherwise)."""
        return self._read(timeout, what)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.sock is not None
        try:
            self.sock.sendall(line_of(message))
        except OSError:
            raise self._gone() from None

    def _read(self, timeout: float, what: str, bound: float | None = None) -> dict[str, Any]:
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
            if len(self.buffer) > MAX_LINE:
                self.kill()
                raise ChildBroken(f"sent an answer over {MAX_LINE >> 20} MiB and was killed")
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


def fork_here() -> None:
    """From now on, fork sandbox children from this process rather than the fork server: for a harness
    worker, which has vLLM's scheduling code imported (and instrumented) before it loads a candidate, so a
    child starts without a second import of vLLM (a fork server's is seconds on a loaded machine)."""
    global _fork_here
    _fork_here = True


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
Handler = Callable[[dict[str, Any], Ask], dict[str, Any] | None]


def serve(fd: int, ready: Callable[[], dict[str, Any]], handle: Handler) -> None:
    """The child's side: send ``ready()``, then answer each line with ``handle(line, ask)`` until EOF (a None
    answer is not sent: a speculative call dropped); ``ask(question)`` sends ``{"ask": question}`` and returns
    the parent's answer (:meth:`JsonChild.call`), dropping what the parent sent before it read the question.

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
            # else sent before the parent read the question: speculative calls it will make again, dropped
        raise SystemExit(0)  # the parent is gone

    send(ready())
    for line in reader:
        answer = handle(json.loads(line), ask)
        if answer is not None:
            send(answer)


if __name__ == "__main__":  # ``python -m fuzz.sandbox.channel SCRATCH MODULE FD ARGS...``: an exec'd child
    contained_main(sys.argv[2], int(sys.argv[3]), sys.argv[4:], Path(sys.argv[1]))
