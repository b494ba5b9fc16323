"""The verifier actor: pulls bundles from the crash store and confirms each (``fuzz.triage.confirm``)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from fuzz.triage.confirm import confirm_bundle
from workers.campaign.config import CampaignConfig


class VerifierActor:
    """Pulls bundles from the crash store and confirms each on the engine tier (``fuzz.triage.confirm``)."""

    def __init__(self, name: str, config: CampaignConfig, crash_store: Any):
        self.name, self.config, self.crash_store = name, config, crash_store
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"{name}-loop", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import ray

        while not self._stop.is_set():
            bundle = ray.get(self.crash_store.next_verification.remote(self.name))
            if bundle is None:
                self._stop.wait(1.0)
                continue
            error = None
            try:
                state = confirm_bundle(Path(bundle), self.config.verify_tier)
            except Exception as exc:  # a bad bundle or an engine error: recorded, never a silent pass
                state, error = "inconclusive", f"{type(exc).__name__}: {exc}"
            ray.get(self.crash_store.verified.remote(self.name, Path(bundle).name, state, error))
            self.done += 1

    def stats(self) -> dict[str, Any]:
        return {"actor": self.name, "pid": os.getpid(), "done": self.done}

    def stop(self, timeout: float = 5) -> None:
        self._stop.set()
        self._thread.join(timeout)
