"""Whether a host is this machine: ``localhost`` or a loopback address (IPv4 or IPv6), never a name resolved."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str | None) -> bool:
    """``localhost``, ``127.x.y.z`` or ``::1``; ``None`` and any other name or address are not."""
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
