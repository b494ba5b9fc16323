"""Counts in words: ``1 worker``, ``2 workers`` (never ``1 workers`` nor ``worker(s)``)."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and ``noun`` in agreement; ``nouns`` where the plural is not ``noun + "s"``."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"
