"""One observed divergence: what kind, on which side, where, and its one-line summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Divergence:
    """A correctness finding (``fuzz.oracle.judge``) or an efficiency one (``fuzz.oracle.efficiency``)."""

    kind: str
    side: str  # candidate | reference | both | unknown
    summary: str
    request_id: str | None = None
    step: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
