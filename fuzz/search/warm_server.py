"""``python -m fuzz.search.warm_server SOCKET IDLE_S``: imports vLLM once, then forks harness workers on request.

The invariants are ``fuzz.search.warm``'s; it is single-threaded, binds its socket under a temporary name, renames it
into place once ready, and removes it when it stops serving."""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from fuzz.errors import ConfigRejected
from fuzz.model.deadline import exit_when_stuck
from fuzz.model.policies import resolve_policy
from fuzz.search import harness
from fuzz.search.coverage import Probes
from fuzz.search.generate import random_scenario
from fuzz.search.settings import RunSettings
from fuzz.search.warm import MESSAGE_BYTES, CodeKey, ImportedFiles, ImportEnvironment
from fuzz.tiers import executor_for

POLL_S = 0.5


class Server:
    def __init__(self, path: Path, idle: float, probes: Probes, ready_s: float, environment: ImportEnvironment,
                 code: CodeKey | None = None):
        self.path, self.idle, self.probes, self.ready_s = path, idle, probes, ready_s
        self.environment, self.code = environment, code or CodeKey.here()
        self.imported = ImportedFiles(sorted({f for m in list(sys.modules.values())
                                              if isinstance(f := getattr(m, "__file__", None), str)}))
        self.children: dict[int, socket.socket | None] = {}  # worker pid -> its run's connection, while open
        self.serving, self.since, self.last_request = True, time.time(), time.monotonic()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.listener.bind(str(staging))
        os.chmod(staging, 0o600)
        self.listener.listen(16)
        os.replace(staging, path)
        self.inode = os.stat(path).st_ino

    def serve(self) -> None:
        """Answer requests until stopped or idle, then until every forked worker has ended."""
        print(f"warm server {os.getpid()} ready at {self.path} after {self.ready_s:.1f}s", flush=True)
        while self.serving or self.children:
            watched = [conn for conn in self.children.values() if conn is not None]
            for ready in select.select([self.listener, *watched] if self.serving else watched, [], [], POLL_S)[0]:
                if ready is self.listener:
                    conn, _ = self.listener.accept()
                    self.last_request = time.monotonic()
                    self._answer(conn)
                else:
                    self._client_gone(ready)
            self._reap()
            if self.serving and not self.children and time.monotonic() - self.last_request > self.idle:
                self._stop_serving(f"idle for {self.idle:.0f}s")
        self._stop_serving("done")

    def status(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "since": self.since, "ready_s": round(self.ready_s, 2), "idle_s": self.idle,
                "workers": len(self.children), "serving": self.serving, "socket": str(self.path)}

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        fds: list[int] = []
        try:
            data, fds, _, _ = socket.recv_fds(conn, MESSAGE_BYTES, 3)
            request = json.loads(data)
            if "fork" in request and len(fds) == 3:
                refused = self._refusal(request["fork"])
                if refused is None:
                    pid = self._fork(request["fork"], fds, conn)
                    conn.send(json.dumps({"pid": pid}).encode())
                    self.children[pid] = conn
                    return
                conn.send(json.dumps({"refused": refused}).encode())
            elif request.get("stop"):
                self._stop_serving("asked to stop")
                conn.send(json.dumps(self.status()).encode())
            else:
                conn.send(json.dumps(self.status()).encode())
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            print(f"warm server: a request failed: {type(exc).__name__}: {exc}", flush=True)
        finally:
            for fd in fds:
                os.close(fd)
        conn.close()

    def _refusal(self, fork: dict[str, Any]) -> str | None:
        changed = self.imported.changed()
        if changed:
            self._stop_serving(f"{changed} changed since it was imported")
            return f"{changed} changed since it was imported"
        other_code = self.code.difference(fork.get("code"))
        if other_code is not None:
            return other_code
        differs = self.environment.difference(fork["env"])
        if differs is not None:
            return f"its {differs} is not the one vLLM was imported under"
        if RunSettings.from_env(fork["env"]).target != "split":
            return "only the split target is served warm"
        return None

    def _fork(self, fork: dict[str, Any], fds: list[int], conn: socket.socket) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            with contextlib.suppress(OSError):  # as the child does: the group exists whichever runs first
                os.setpgid(pid, pid)
            return pid
        code = 1
        try:
            os.setpgid(0, 0)  # the worker and what it starts: one group, killed with it if its run goes away
            self.listener.close()
            conn.close()
            for other in self.children.values():
                if other is not None:
                    other.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            os.chdir(fork["cwd"])
            os.environ.clear()
            os.environ.update(self.environment.for_worker(fork["env"]))
            argv = [str(a) for a in fork["argv"]]
            sys.argv = argv
            settings = RunSettings.from_env()
            exit_when_stuck()
            harness.starting("forked from the warm server")
            harness.fuzz_split(argv, settings, self.probes)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - the worker's own traceback, on its stderr, as a cold worker's
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def _client_gone(self, conn: socket.socket) -> None:
        """The run that asked for these workers closed its connection: their process groups are killed."""
        conn.close()
        for pid in [pid for pid, c in self.children.items() if c is conn]:
            self.children[pid] = None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
                conn.close()

    def _stop_serving(self, why: str) -> None:
        """No new requests: the socket is removed (if it is still this server's) so runs start cold."""
        if not self.serving:
            return
        self.serving = False
        self.listener.close()
        try:
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except OSError:
            pass
        print(f"warm server {os.getpid()} stops serving: {why}", flush=True)


WARM_UP_SCENARIOS = 8


def warm_up() -> None:
    """Run a few scenarios, vLLM against itself, so first-configuration builds happen here once (only caches warm)."""
    vllm = resolve_policy("vllm")
    for seed in range(WARM_UP_SCENARIOS):
        with contextlib.suppress(ConfigRejected):
            executor_for("sim").run(random_scenario(random.Random(seed)), vllm)


def main(argv: list[str]) -> None:
    started, before, code = time.monotonic(), dict(os.environ), CodeKey.here()
    probes = harness.prepare()
    harness.starting("running a few scenarios: vLLM's first configuration builds")
    warm_up()
    harness.settle_heap()
    Server(Path(argv[1]), float(argv[2]), probes, time.monotonic() - started, ImportEnvironment.since(before),
           code).serve()


if __name__ == "__main__":
    main(sys.argv)
