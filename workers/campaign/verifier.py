"""The verifier actor: pulls bundles from the crash store and confirms each (``fuzz.triage.confirm``).

Invariant: no wait on the crash store is unbounded; a bundle whose result does not reach it stays unconfirmed
and is leased again."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from fuzz.sandbox.scope import ambient
from fuzz.triage.confirm import confirm_bundle
from workers.campaign.config import CampaignConfig
from workers.campaign.crash_store import crash_store_named

CALL_TIMEOUT = 30.0  # seconds a call to the crash store may take before it is asked again


class VerifierActor:
    def __init__(self, name: str, config: CampaignConfig, crash_store: str):
        ambient()  # a user's candidate answers from a sandbox child of this actor, never beside the engine's audit
        self.name, self.config, self.store_name, self._store = name, config, crash_store, None
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"{name}-loop", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import ray

        executor = None
        while not self._stop.is_set():
            store = self._store = self._store or crash_store_named(self.store_name)
            try:
                bundle = None if store is None else ray.get(store.next_verification.remote(self.name),
                                                            timeout=CALL_TIMEOUT)
            except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
                bundle = None  # the crash store is restarting: ask again
            if bundle is None:
                self._stop.wait(1.0)
                continue
            error = None
            try:
                executor = executor or verification_executor(self.config)
                state = confirm_bundle(Path(bundle), self.config.verify_tier, executor, self.config.run.candidate,
                                       self.config.run.reference)  # the campaign's own, never the bundle's
            except Exception as exc:  # a bad bundle, an engine error, a refused write: recorded, never a silent pass
                state, error = "inconclusive", f"{type(exc).__name__}: {exc}"
            # not waited for: a crash store that misses it leases the bundle again (it stays unconfirmed on disk)
            store.verified.remote(self.name, Path(bundle).name, state, error)
            self.done += 1

    def stats(self) -> dict[str, Any]:
        return {"actor": self.name, "pid": os.getpid(), "done": self.done}

    def stop(self, timeout: float = 5) -> None:
        self._stop.set()
        self._thread.join(timeout)


def verification_executor(config: CampaignConfig) -> Any:
    """The kernel tier on ``config.kernel_backend`` when verifying there; None (the tier's own executor) otherwise."""
    if config.verify_tier != "kernels":
        return None
    from workers.kernels.executor import KernelExecutor  # noqa: PLC0415 - torch only where kernels verify

    return KernelExecutor(config.kernel_backend)
