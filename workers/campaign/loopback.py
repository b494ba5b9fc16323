"""Ray on one machine stays on 127.0.0.1.

Ray rewrites ``127.0.0.1`` to the interface address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before
``import ray`` in every Ray process. Invariants: embedded Ray and loopback-addressed clusters run with
:data:`LOOPBACK_ENV`; if Ray was imported first, :func:`use_loopback` refuses rather than listen everywhere."""

from __future__ import annotations

import os
import sys

from fuzz.errors import ToolError
from fuzz.loopback import is_loopback_host

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def is_loopback(address: str) -> bool:
    """``local`` (the embedded Ray), or an address whose host is a loopback one (``127.0.0.1:6379``, ``localhost``)."""
    return address == "local" or is_loopback_host(address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]"))


def use_loopback() -> None:
    """Put :data:`LOOPBACK_ENV` in force for this process (before Ray is imported) and the ones it starts."""
    os.environ.update(LOOPBACK_ENV)
    if "ray" in sys.modules:
        from ray._private import ray_constants

        if ray_constants.ENABLE_RAY_CLUSTER:
            raise ToolError("Ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set: it would listen "
                            "on every interface; set it in the environment and start again")
