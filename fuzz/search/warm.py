"""A warm server kept across runs (``gdnfuzz warm``): harness workers forked with vLLM already imported (client side).

Invariants: a forked worker runs the code a cold one would (the server refuses another interpreter or import path,
a changed imported file, or an environment differing in what vLLM's import reads or sets); no server, a bad answer
or a refusal is a cold start, and a worker lost with its server restarts cold; the server exits after its idle limit."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fuzz.interpreter import python_command
from fuzz.search.coverage_cache import default_dir

SERVER_MODULE = "fuzz.search.warm_server"
MESSAGE_BYTES = 1 << 20  # one request (arguments and environment) fits in one datagram
DEFAULT_IDLE_S = 1800.0
READY_TIMEOUT_S = 300.0  # a server's start: vLLM's import and instrumentation on a loaded machine


def socket_path(directory: Path | None = None) -> Path:
    """Where this interpreter's server listens (under the cache directory, ``$GDNFUZZ_CACHE_DIR``)."""
    key = hashlib.sha256(f"{sys.executable}\0{sys.version}".encode()).hexdigest()[:16]
    return (directory or default_dir()) / f"warm-{key}.sock"


@dataclass(frozen=True)
class ImportEnvironment:
    """The environment vLLM was imported under (``before``) and what the import set, which a forked worker gets too."""

    before: dict[str, str]
    set_by_import: dict[str, str]

    @classmethod
    def since(cls, before: dict[str, str]) -> ImportEnvironment:
        """Taken after the import: what differs from ``before`` now."""
        return cls(before, {k: v for k, v in os.environ.items() if before.get(k) != v})

    def difference(self, env: dict[str, str]) -> str | None:
        """The first variable vLLM's import reads or sets (``VLLM_*``, or one it set) whose value in ``env``
        is not the one the import saw; None if there is none."""
        keys = sorted({k for k in (*env, *self.before) if k.startswith("VLLM_")} | set(self.set_by_import))
        return next((k for k in keys if env.get(k) != self.before.get(k)), None)

    def for_worker(self, env: dict[str, str]) -> dict[str, str]:
        """A forked worker's environment: its run's, with what the import set, as a cold worker would have it."""
        return {**env, **self.set_by_import}


@dataclass(frozen=True)
class CodeKey:
    """What decides a worker's code besides its environment: the interpreter (real path, version) and ``sys.path``."""

    interpreter: str
    sys_path: tuple[str, ...]

    @classmethod
    def here(cls) -> CodeKey:
        """This process's (the server's, taken before anything changes its import path)."""
        return cls(_interpreter(), tuple(sys.path))

    @classmethod
    def cold(cls, env: dict[str, str], cwd: str) -> CodeKey | None:
        """A cold worker's, as this interpreter starts with ``env`` in ``cwd`` (asked of it: ``PYTHONPATH``,
        a relative entry's directory, ``.pth`` files); None if it cannot say."""
        try:
            done = subprocess.run(python_command("-c", "import json, sys; print(json.dumps(sys.path))"), env=env,
                                  cwd=cwd, capture_output=True, text=True, timeout=COLD_PATH_TIMEOUT_S, check=True)
            path = json.loads(done.stdout)
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
        return cls(_interpreter(), tuple(map(str, path)))

    def to_dict(self) -> dict[str, Any]:
        return {"interpreter": self.interpreter, "sys_path": list(self.sys_path)}

    def difference(self, asked: Any) -> str | None:
        """What differs from a request's key (``to_dict``), in words; None if nothing."""
        if not isinstance(asked, dict):
            return "it did not say which interpreter and import path its workers start with"
        if asked.get("interpreter") != self.interpreter:
            return f"its interpreter ({asked.get('interpreter')}) is not this server's ({self.interpreter})"
        if asked.get("sys_path") != list(self.sys_path):
            theirs = asked.get("sys_path") if isinstance(asked.get("sys_path"), list) else []
            first = next((str(p) for p in theirs if p not in self.sys_path), None)
            return ("its import path is not the one this server imported under"
                    + (f" ({first} is not on this server's)" if first else " (PYTHONPATH or its order differs)"))
        return None


def _interpreter() -> str:
    return f"{os.path.realpath(sys.executable)} {sys.version.split()[0]}"


COLD_PATH_TIMEOUT_S = 60.0


class ImportedFiles:
    """The imported modules' files with a stat and a content hash taken at start; :meth:`changed` names a file
    exactly when its content or presence changed (a changed stat is checked against the hash)."""

    def __init__(self, paths: list[str]):
        self.stamps = {path: _stamp(path) for path in paths}
        self.digests = {path: _digest(path) for path in paths}

    def changed(self) -> str | None:
        for path, stamp in self.stamps.items():
            now = _stamp(path)
            if now == stamp:
                continue
            if _digest(path) != self.digests[path]:
                return path
            self.stamps[path] = now
        return None


def _stamp(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _connect(path: Path, timeout: float) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def ask(message: dict[str, Any], path: Path | None = None, timeout: float = 5.0,
        fds: list[int] | None = None) -> tuple[socket.socket, dict[str, Any]] | None:
    """Send ``message`` (and ``fds``); the open socket and the server's first answer, or None if none answered."""
    sock = _connect(path or socket_path(), timeout)
    if sock is None:
        return None
    try:
        socket.send_fds(sock, [json.dumps(message).encode()], fds or [])
        answer = sock.recv(MESSAGE_BYTES)
        return sock, json.loads(answer)
    except (OSError, ValueError):
        sock.close()
        return None


class WarmWorker:
    """A server-forked worker with the ``subprocess.Popen`` surface the supervisor uses, its exit status from the
    server; if the server goes first, the worker's group is killed and :attr:`lost` set (restart it cold)."""

    def __init__(self, sock: socket.socket, pid: int, stderr: IO[str]):
        self.sock, self.pid, self.stderr = sock, pid, stderr
        self.returncode: int | None = None
        self.lost = False
        try:
            self.pidfd: int | None = os.pidfd_open(pid)  # the worker itself, whatever reuses its pid later
        except OSError:
            self.pidfd = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self.sock], [], [], 0)[0]:
            self._read_exit()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self.sock], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"warm worker {self.pid}", timeout or 0)
            self._read_exit()
        assert self.returncode is not None
        return self.returncode

    def _read_exit(self) -> None:
        try:
            self.returncode = int(json.loads(self.sock.recv(MESSAGE_BYTES))["exit"])
        except (OSError, ValueError, KeyError, TypeError):  # the server went away, or said nothing that makes sense
            self.lost = True
            self._kill_group()
            self.returncode = -signal.SIGKILL
        self.sock.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def _kill_group(self) -> None:
        """Kill the orphaned worker and its process group, if the worker is still the process it was."""
        if self.pidfd is None or select.select([self.pidfd], [], [], 0)[0]:
            return  # it has ended (or cannot be told apart from a later process with its pid)
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        select.select([self.pidfd], [], [], 5.0)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_worker(argv: list[str], env: dict[str, str], cwd: str) -> WarmWorker | None:
    """A harness worker the server forked with this argv, env and cwd, its stderr a pipe to us; None: start it cold."""
    if not socket_path().exists():
        return None  # no server: a cold start, without asking the interpreter for its import path
    code = CodeKey.cold(env, cwd)
    if code is None:
        return None
    read_end, write_end = os.pipe()
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        answered = ask({"fork": {"argv": argv, "env": env, "cwd": cwd, "code": code.to_dict()}},
                       fds=[devnull, devnull, write_end])
    finally:
        os.close(write_end)
        os.close(devnull)
    if answered is None or not isinstance(answered[1].get("pid"), int):
        os.close(read_end)
        if answered is not None:
            answered[0].close()
        return None
    sock, answer = answered
    sock.settimeout(None)
    return WarmWorker(sock, answer["pid"], os.fdopen(read_end, "r", errors="replace"))


def _one_answer(message: dict[str, Any], path: Path | None) -> dict[str, Any] | None:
    answered = ask(message, path)
    if answered is None:
        return None
    answered[0].close()
    return answered[1]


def status(path: Path | None = None) -> dict[str, Any] | None:
    """The server's own account (pid, since, workers alive, idle limit), or None if none answers."""
    return _one_answer({"status": True}, path)


def start_server(idle: float, env: dict[str, str], path: Path | None = None) -> dict[str, Any]:
    """Start a server in its own session under ``env``; its status once it answers (a running one's as it is).
    A server that dies first is a ``RuntimeError`` with its log's last line."""
    path = path or socket_path()
    running = status(path)
    if running is not None:
        return running
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.with_suffix(".log")
    with open(log, "w") as out:
        proc = subprocess.Popen(python_command("-m", SERVER_MODULE, str(path), repr(idle)), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=out, start_new_session=True, cwd=path.parent, env=env)
    end = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < end:
        answer = status(path)
        if answer is not None:
            return answer
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(nothing)"]
    raise RuntimeError(f"the warm server did not start: {tail[0]}")


def stop_server(path: Path | None = None) -> dict[str, Any] | None:
    """Ask the server to stop taking requests and exit once its workers have ended; its last status, or None."""
    return _one_answer({"stop": True}, path)
