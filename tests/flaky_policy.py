"""A flaky split, for the verify-fixed tests: every other run of the scheduler uses the pre-#51113 split
(which poisons the seed regression's slot), the others the installed vLLM's (which does not).

A run is one scheduler instance (the sim tier builds a fresh one per run): the choice is made on its
first call and kept for the whole run.
"""

from __future__ import annotations

import itertools
from typing import Any

from fuzz.model.policies import BUILTINS

_RUNS = itertools.count()


def flaky_split(self: Any, request: Any, num_new_tokens: int,
                num_new_local_computed_tokens: int = 0, num_external_computed_tokens: int = 0) -> int:
    if not hasattr(self, "_gdnfuzz_flaky_bad"):
        self._gdnfuzz_flaky_bad = next(_RUNS) % 2 == 0
    split = BUILTINS["pre-51113" if self._gdnfuzz_flaky_bad else "vllm"][0]
    return split(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
