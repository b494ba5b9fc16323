"""A corpus file's ``expect``: each policy's verdict status, or ``{version: status}``, each holding from that vLLM on.
Invariant: :func:`expected_status` is the one reading of it; a vLLM older than every version named expects nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuzz.model.knobs import EngineKnobs, first_release
from fuzz.model.vllm_build import installed_vllm, release


def expected_status(expect: Mapping[str, Any] | None, policy: str, version: str | None = None) -> str | None:
    """What ``expect`` says ``policy``'s verdict is on vLLM ``version`` (default: the installed one), or None."""
    value = (expect or {}).get(policy)
    if value is None or isinstance(value, str):
        return value
    installed = release(version or installed_vllm().version)
    since = [(release(v), status) for v, status in value.items() if release(v) <= installed]
    return max(since)[1] if since else None


def as_found(statuses: Mapping[str, str], engine: EngineKnobs) -> dict[str, Any]:
    """The expectation a new finding records: its statuses, from the first release with every knob it sets."""
    since = first_release(engine)
    return {policy: status if since is None else {since: status} for policy, status in statuses.items()}


def expected_statuses(expect: Mapping[str, Any] | None, version: str | None = None) -> dict[str, str]:
    """Every policy's expected status on vLLM ``version`` (default: the installed one), where it has one."""
    found = {policy: expected_status(expect, policy, version) for policy in expect or {}}
    return {policy: status for policy, status in found.items() if status is not None}
