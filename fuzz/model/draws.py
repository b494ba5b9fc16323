"""Biased draws every scenario generator and mutator makes: lengths near multiples of the Mamba block B, budgets
that fragment a block, KV pools barely large enough (preemption).
Invariant: every draw is a function of the values ``Choices`` returns, in a fixed order, so a seed fixes a scenario."""

from __future__ import annotations

from typing import Any, Protocol

MAMBA_BLOCK_SIZES = (64, 128, 256, 384, 512, 1600)
MAX_NUM_SEQS = (1, 2, 4, 8, 16)  # the generator's running-request limits
CHECKPOINT_ALIGNMENTS = (1, 1, 16, 64)  # Mamba2 declares 1; KDA layers declare their chunk size


class Choices(Protocol):
    def randint(self, a: int, b: int) -> int: ...
    def choice(self, seq: Any) -> Any: ...
    def random(self) -> float: ...


def near_multiple(c: Choices, block: int, max_blocks: int = 3) -> int:
    """A length within a few tokens of k * block (k >= 1), or anywhere up to max_blocks * block."""
    k = c.randint(1, max_blocks)
    delta = c.choice((-1, 0, 1, -c.randint(2, 48), c.randint(2, 48), c.randint(-block + 1, block - 1)))
    return max(1, k * block + delta)


def fragmenting_budget(c: Choices, block: int) -> int:
    """A step budget that cuts a block of ``block`` tokens into pieces (or covers a few blocks)."""
    return max(16, c.choice((
        block // 2 + c.randint(-8, 8),
        block,
        block + c.randint(1, 64),
        2 * block - c.randint(1, 64),
        c.randint(16, 4 * block),
        c.randint(block // 8 + 1, block),
    )))


def at_block(c: Choices, block: int) -> int:
    """A token count of exactly ``block`` or one either side: where ``<`` and ``<=`` against a block part ways."""
    return block + c.choice((-1, 0, 0, 1))


def tight_kv_blocks(required: int, slack: float) -> int:
    """A pool holding a request of ``required`` blocks with ``slack`` in [0, 1) to spare (preemption pressure)."""
    return int(required * (1.0 + slack)) + 4
