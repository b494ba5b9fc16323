"""Ray on one machine stays on 127.0.0.1.

Ray binds its processes to the address it takes for the machine's, and rewrites ``127.0.0.1`` in an
address to the interface address (``resolve_ip_for_localhost``) unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``
is ``0`` in the environment of every Ray process: the head, every node and the driver. Ray reads it once,
when it is first imported, so it is set here before ``import ray``, and the processes Ray starts inherit it.

Invariants: the embedded local Ray (``--address local``) and a cluster named by a loopback address run
with :data:`LOOPBACK_ENV`; if Ray was imported before that in this process, :func:`use_loopback` refuses
(one line) rather than let Ray listen on every interface.
"""

from __future__ import annotations

import ipaddress
import os
import sys

from fuzz.errors import ToolError

LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def is_loopback(address: str) -> bool:
    """``local`` (the embedded Ray), or an address whose host is a loopback one (``127.0.0.1:6379``, ``localhost``)."""
    if address == "local":
        return True
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def use_loopback() -> None:
    """Put :data:`LOOPBACK_ENV` in force for this process (before Ray is imported) and the ones it starts."""
    os.environ.update(LOOPBACK_ENV)
    if "ray" in sys.modules:
        from ray._private import ray_constants

        if ray_constants.ENABLE_RAY_CLUSTER:
            raise ToolError("Ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set: it would listen "
                            "on every interface; set it in the environment and start again")
