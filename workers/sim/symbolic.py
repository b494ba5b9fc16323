"""Exact symbolic recurrent states, and the deterministic toy "model" that reads them.

A ``State`` is the exact sequence of token ids a recurrent state consumed: equal iff the same tokens, so a state
written at the wrong position changes every token sampled from it. ``next_token`` hashes the state."""

from __future__ import annotations

import hashlib
from array import array
from typing import Any

from fuzz.model.scenario import VOCAB_SIZE


class State:
    """Immutable: the tokens consumed and their blake2b digest (32-bit words), computed once; ``extend`` continues
    a copy of the parent's hash stream (the same digest as hashing all at once), so continuations are linear."""

    __slots__ = ("tokens", "_digest", "_stream")

    def __init__(self, tokens: tuple[int, ...] = ()):
        self.tokens = tokens
        self._digest: bytes | None = None
        self._stream: Any = None  # blake2b over exactly ``tokens``, once computed

    def extend(self, more: list[int] | tuple[int, ...]) -> State:
        if not more:
            return self
        more = tuple(more)
        child = State(self.tokens + more)
        if self._stream is not None:
            child._stream = self._stream.copy()
            child._stream.update(array("I", more).tobytes())
        return child

    def __len__(self) -> int:
        return len(self.tokens)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, State) and self.tokens == other.tokens

    def __hash__(self) -> int:
        return hash(self.digest())

    def digest(self) -> bytes:
        if self._digest is None:
            if self._stream is None:
                self._stream = hashlib.blake2b(array("I", self.tokens).tobytes(), digest_size=16)
            self._digest = self._stream.digest()
        return self._digest

    def fingerprint(self) -> str:
        return self.digest().hex()[:12]

    def describe_against(self, expected: list[int] | tuple[int, ...]) -> tuple[int | None, str]:
        """(prefix length held, text): ``state@364`` when this is a prefix of ``expected``."""
        n = len(self.tokens)
        if n <= len(expected) and tuple(expected[:n]) == self.tokens:
            return n, f"state@{n}"
        common = 0
        for a, b in zip(self.tokens, expected, strict=False):
            if a != b:
                break
            common += 1
        return None, f"a state of {n} tokens that leaves the prompt after {common}"


ZERO = State()


def next_token(state: State) -> int:
    """The toy model's greedy token after ``state`` (never 0: 0 is no token id)."""
    return int.from_bytes(state.digest()[:4], "little") % (VOCAB_SIZE - 1) + 1


def greedy_continuation(state: State, count: int) -> list[int]:
    """``count`` greedy tokens from ``state``: what a run with exact states produces."""
    out: list[int] = []
    for _ in range(count):
        token = next_token(state)
        out.append(token)
        state = state.extend((token,))
    return out
