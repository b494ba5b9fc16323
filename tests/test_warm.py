"""The warm server (``gdnfuzz warm``): runs fork their workers from it, find what cold workers find, and
start cold whenever it is absent, refuses, or has gone stale."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import seed_case

from fuzz.search import warm
from fuzz.search.settings import RunSettings
from fuzz.search.warm import CodeKey, ImportedFiles, ImportEnvironment
from fuzz.search.warm_server import Server


def _gdnfuzz(*args: str, env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "fuzz.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_a_run_forks_its_workers_from_the_warm_server_and_finds_the_seed_bug(tmp_path):
    env = {**os.environ, "GDNFUZZ_CACHE_DIR": str(tmp_path / "cache")}
    started = _gdnfuzz("warm", "--idle", "120", "--json", env=env, cwd=tmp_path)
    assert started.returncode == 0, started.stderr[-2000:]
    server = json.loads(started.stdout)
    try:
        corpus = tmp_path / "corpus"
        (corpus / "seeds").mkdir(parents=True)
        shutil.copy(seed_case(), corpus / "seeds")
        out = _gdnfuzz("run", "--candidate", "pre-51113", "--runs", "3", "--max-time", "0", "--corpus", str(corpus),
                       "--crashes", str(tmp_path / "crashes"), "--minimize-time", "30", "--json", env=env, cwd=tmp_path)
        record = json.loads(out.stdout.splitlines()[-1])
        assert "forked from the warm server" in record["startup"], out.stderr[-2000:]
        assert record["exit_code"] == 1 and record["worker_crashes"] == 0  # its exit status came back as 0
        assert "split-eagle-drop-runs-past" in [s["signature"] for s in record["signatures"]]
        assert (tmp_path / "crashes" / "split-eagle-drop-runs-past" / "verdict.json").exists()
        assert json.loads(_gdnfuzz("warm", "--status", "--json", env=env, cwd=tmp_path).stdout)["workers"] == 0
        # a run killed outright (a cold worker would share its fate through its process group): its worker goes
        run = subprocess.Popen([sys.executable, "-P", "-m", "fuzz.cli", "run", "--candidate", "vllm", "--max-time",
                                "300", "--corpus", str(corpus), "--crashes", str(tmp_path / "crashes2")],
                               env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert _workers_become(1, tmp_path / "cache")
        run.kill()
        run.wait()
        assert _workers_become(0, tmp_path / "cache")
    finally:
        stopped = _gdnfuzz("warm", "--stop", "--json", env=env, cwd=tmp_path)
    assert json.loads(stopped.stdout)["pid"] == server["pid"]
    assert json.loads(_gdnfuzz("warm", "--status", "--json", env=env, cwd=tmp_path).stdout) is None
    for _ in range(100):  # it exits once it has stopped serving and has no worker left
        if not Path(f"/proc/{server['pid']}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{server['pid']}").exists()


def _workers_become(count: int, cache: Path) -> bool:
    """Whether the server reports ``count`` live workers within a minute."""
    for _ in range(600):
        answer = warm.status(warm.socket_path(cache))
        if answer is not None and answer["workers"] == count:
            return True
        time.sleep(0.1)
    return False


def test_without_a_server_a_worker_starts_cold(tmp_path, monkeypatch):
    monkeypatch.setenv("GDNFUZZ_CACHE_DIR", str(tmp_path))
    assert warm.fork_worker(["fuzz.search.harness"], dict(os.environ), str(tmp_path)) is None
    assert warm.status() is None


def test_a_refusal_is_a_cold_start_and_gives_back_the_descriptors(tmp_path, monkeypatch):
    monkeypatch.setenv("GDNFUZZ_CACHE_DIR", str(tmp_path))
    before = len(os.listdir("/proc/self/fd"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(warm.socket_path()))
    listener.listen(1)

    def refuse() -> None:
        conn, _ = listener.accept()
        _, fds, _, _ = socket.recv_fds(conn, warm.MESSAGE_BYTES, 3)
        for fd in fds:
            os.close(fd)
        conn.send(json.dumps({"refused": "not today"}).encode())
        conn.close()

    thread = threading.Thread(target=refuse)
    thread.start()
    assert warm.fork_worker(["fuzz.search.harness"], dict(os.environ), str(tmp_path)) is None
    thread.join()
    listener.close()
    assert len(os.listdir("/proc/self/fd")) == before


IMPORTED_UNDER = ImportEnvironment(before={"VLLM_LOGGING_LEVEL": "ERROR", "PATH": "/usr/bin"},
                                   set_by_import={"VLLM_SSM_CONV_STATE_LAYOUT": "SD", "TORCHINDUCTOR_COMPILE_THREADS": "1"})


CODE = CodeKey.here()


def _server(tmp_path: Path) -> Server:
    return Server(tmp_path / "warm.sock", idle=60.0, probes=None, ready_s=0.0,  # type: ignore[arg-type]
                  environment=IMPORTED_UNDER, code=CODE)


def _request_env(**changes: str) -> dict[str, str]:
    """A run's worker environment as the server's import saw it, plus ``changes``."""
    return {**RunSettings().child_env({}), **IMPORTED_UNDER.before, **changes}


def _fork(env: dict[str, str], code: dict | None = None) -> dict:
    return {"env": env, "code": CODE.to_dict() if code is None else code}


def test_a_server_refuses_an_environment_its_import_did_not_see(tmp_path):
    server = _server(tmp_path)
    assert server._refusal(_fork(_request_env(PATH="/elsewhere"))) is None  # vLLM's import neither reads nor sets it
    assert server._refusal(_fork(_request_env(VLLM_NEW_SETTING="1"))) == (
        "its VLLM_NEW_SETTING is not the one vLLM was imported under")
    assert server._refusal(_fork(_request_env(TORCHINDUCTOR_COMPILE_THREADS="4"))) == (
        "its TORCHINDUCTOR_COMPILE_THREADS is not the one vLLM was imported under")
    assert server.serving  # another request with the right environment is still served


def test_a_server_refuses_a_run_whose_workers_would_import_other_code(tmp_path):
    server = _server(tmp_path)
    other_path = CodeKey(CODE.interpreter, (str(tmp_path / "branch-a"), *CODE.sys_path)).to_dict()
    assert server._refusal(_fork(_request_env(), other_path)) == (
        f"its import path is not the one this server imported under ({tmp_path / 'branch-a'} is not on this "
        "server's)")
    reordered = CodeKey(CODE.interpreter, tuple(reversed(CODE.sys_path))).to_dict()
    assert "PYTHONPATH or its order differs" in server._refusal(_fork(_request_env(), reordered))
    assert "interpreter" in server._refusal(_fork(_request_env(), {**CODE.to_dict(), "interpreter": "/other 3.12"}))
    assert "did not say" in server._refusal({"env": _request_env()})  # an older client: refused, a cold start
    assert server._refusal(_fork(_request_env())) is None and server.serving


def test_a_cold_workers_import_path_is_asked_of_the_interpreter(tmp_path):
    env = {**os.environ, "PYTHONPATH": "relative-entry"}
    cold = CodeKey.cold(env, str(tmp_path))
    assert cold is not None and str(tmp_path / "relative-entry") in cold.sys_path  # as the worker would resolve it
    assert CodeKey.cold({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, str(tmp_path)) != cold


def test_a_forked_worker_gets_what_the_import_set_as_a_cold_one_would():
    env = IMPORTED_UNDER.for_worker(_request_env())
    assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "SD" and env["TORCHINDUCTOR_COMPILE_THREADS"] == "1"
    assert {k: env[k] for k in _request_env()} == _request_env()  # the run's own settings, untouched


def test_a_server_whose_imported_file_changed_refuses_and_stops_serving(tmp_path):
    server = _server(tmp_path)
    module = tmp_path / "imported.py"
    module.write_text("x = 1\n")
    stamp = os.stat(module)
    server.imported = ImportedFiles([str(module)])
    os.utime(module, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))  # touched: the same bytes, served
    assert server._refusal(_fork(_request_env())) is None
    module.write_text("x = 2\n")  # an edited vLLM checkout: the same size, and its old modification time
    os.utime(module, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert server._refusal(_fork(_request_env())) == f"{module} changed since it was imported"
    assert not server.serving and not (tmp_path / "warm.sock").exists()  # the next run and `warm` start fresh


def test_a_worker_whose_server_went_away_is_lost_and_killed_never_taken_for_its_own_end():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        stderr = open(os.devnull)  # noqa: SIM115 - WarmWorker keeps it, as it keeps a pipe's
        forked = warm.WarmWorker(ours, worker.pid, stderr)
        assert forked.poll() is None and not forked.lost
        theirs.close()  # the server died: no exit status will come
        assert forked.wait(timeout=30) == -9 and forked.lost
        assert worker.wait(timeout=30) == -9  # it took the worker along (its process group)
    finally:
        worker.kill()
        worker.wait()
        stderr.close()


def test_start_up_phases_are_the_first_starts_only():
    from fuzz.search.libfuzzer import Progress

    progress = Progress()
    progress.phases = [(1.0, 0, "forked from the warm server"), (1.5, 0, "loading the corpus"),
                       (40.0, 0, "importing vLLM's scheduling code"), (45.0, 0, "loading the corpus")]
    progress.first_input = 2.0  # the worker's first start ran its first input; a cold restart followed
    assert progress.startup() == ("interpreter and gdnfuzz 1.0s, forked from the warm server 0.5s, "
                                  "loading the corpus 0.5s")
