"""What the driver knows of its actors and cluster, from answers within a bounded wait.

Invariants: no call waits past its timeout; an actor is ``starting``, ``alive``, ``unreachable`` (silent for
:data:`UNREACHABLE_AFTER` s), ``restarting`` or ``dead``, with a rate only when ``alive``; counters never go back
(earlier incarnations and resumed runs are kept in ``base``); restarts count Ray's and the harness's; capacity is
every node seen alive since the start, one no longer alive lost with its CPUs."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

UNREACHABLE_AFTER = 20.0  # seconds without an answer before an actor that answered before is unreachable
HEAD_CHECK_TIMEOUT = 2.0  # seconds to connect to the head's GCS port before the head counts as unreachable


@dataclass
class ActorView:
    name: str
    state: str = "starting"
    stats: dict[str, Any] = field(default_factory=dict)  # its last answer
    pids: set[int] = field(default_factory=set)
    base: int = 0  # execs of earlier incarnations, and of earlier runs of a resumed campaign
    restarts_base: int = 0  # harness restarts of earlier incarnations
    answered: float = 0.0  # when it last answered

    @property
    def execs(self) -> int:
        return self.base + int(self.stats.get("execs", 0))

    @property
    def restarts(self) -> int:
        return max(len(self.pids) - 1, 0) + self.restarts_base + int(self.stats.get("restarts", 0))

    @property
    def exec_per_s(self) -> float:
        return float(self.stats.get("exec_per_s", 0)) if self.state == "alive" else 0.0


class ActorWatch:
    """The views of a set of actors, updated by :meth:`gather`."""

    def __init__(self, names: list[str], carried: dict[str, int]):
        self.views = {name: ActorView(name, base=carried.get(name, 0)) for name in names}

    def gather(self, handles: dict[str, Any], timeout: float, method: str = "stats") -> dict[str, ActorView]:
        """Call each actor's ``method`` (its stats, with a ``pid``) and wait at most ``timeout`` seconds for all."""
        import ray

        refs = {name: getattr(handle, method).remote() for name, handle in handles.items()}
        ready = set(ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)[0]) if refs else set()
        for name, ref in refs.items():
            view = self.views[name]
            if ref not in ready:  # busy for a while (a crash store storing a bundle) is not unreachable
                if not view.pids or time.time() - view.answered > UNREACHABLE_AFTER:
                    view.state = "starting" if not view.pids else "unreachable"
                continue
            try:
                self.answer(view, ray.get(ref, timeout=0))
            except ray.exceptions.ActorUnavailableError:
                view.state = "restarting"
            except ray.exceptions.ActorDiedError:
                view.state = "dead"
            except ray.exceptions.RayActorError:
                view.state = "restarting"
        return self.views

    @staticmethod
    def answer(view: ActorView, stats: dict[str, Any]) -> None:
        """Take an actor's answer: a new pid is a new incarnation, whose counters start from zero."""
        if view.pids and stats["pid"] not in view.pids:
            view.base += int(view.stats.get("execs", 0))
            view.restarts_base += int(view.stats.get("restarts", 0))
        view.pids.add(stats["pid"])
        view.stats, view.state, view.answered = stats, "alive", time.time()

    def mark(self, state: str) -> None:
        """Set every actor that is not dead to ``state`` (``stopped`` at the end)."""
        for view in self.views.values():
            if view.state != "dead":
                view.state = state


@dataclass(frozen=True)
class Capacity:
    nodes: int
    nodes_lost: int
    cpus: float
    cpus_lost: float


class ClusterWatch:
    """Every node seen alive since the start, and which are gone. :meth:`poll` calls ``ray.nodes()`` (which
    blocks while the head is gone) on its own thread with a bounded wait."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}  # node id -> its CPUs
        self.last = Capacity(0, 0, 0.0, 0.0)
        self._answer: list[Any] = []
        self._pending: threading.Thread | None = None

    def poll(self, timeout: float) -> Capacity:
        """The capacity from a ``ray.nodes()`` answered within ``timeout`` seconds, else the last one."""
        import ray

        if self._pending is None:
            self._answer = []
            self._pending = threading.Thread(target=lambda: self._answer.append(_or_none(ray.nodes)), daemon=True,
                                             name="cluster-watch")
            self._pending.start()
        self._pending.join(timeout)
        if self._pending.is_alive():
            return self.last
        self._pending = None
        if self._answer and self._answer[0] is not None:
            self.last = self.capacity(self._answer[0])
        return self.last

    def capacity(self, nodes: list[dict[str, Any]]) -> Capacity:
        """From ``ray.nodes()``: the nodes and CPUs alive now, and those seen alive before and gone since."""
        alive = {n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0.0)) for n in nodes if n.get("Alive")}
        self.seen.update(alive)
        lost = {node: cpus for node, cpus in self.seen.items() if node not in alive}
        return Capacity(len(alive), len(lost), sum(alive.values()), sum(lost.values()))


def _or_none(call: Any) -> Any:
    try:
        return call()
    except Exception:  # a head that answers with an error: no news this round
        return None


def head_reachable(gcs_address: str) -> bool:
    """Whether the head's GCS port takes a connection (checked before any call that would wait on it)."""
    host, _, port = gcs_address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=HEAD_CHECK_TIMEOUT):
            return True
    except (OSError, ValueError):
        return False
