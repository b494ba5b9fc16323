"""The bounded exhaustive check: it covers the grid it states, finds a difference at one corner of it, names
a call that reproduces, passes a split equal to the reference, and refuses what the grid cannot vary."""

from __future__ import annotations

from typing import Any

import pytest

from fuzz.model.knobs import KNOBS, parse_engine
from fuzz.model.policies import resolve_policy
from workers.sim import equivalence
from workers.sim.scheduler import build_scheduler


@pytest.fixture(scope="module")
def installed() -> Any:
    return resolve_policy("vllm").split


def test_the_grid_reaches_every_stated_corner(installed: Any) -> None:
    grid = equivalence.grid()
    assert grid.rejected == 0 and grid.configs == len(equivalence.config_grid(
        KNOBS["disable_lookahead_block_hashes"].needs.installed))
    schedulers = [view.scheduler for view in grid.views]
    assert {s.mamba_partial_cache_hit for s in schedulers} == {False, True}
    assert {s.mamba_shared_prefix_checkpoint for s in schedulers} == {False, True}
    assert {s.use_eagle_block_drop for s in schedulers} == {False, True}
    assert {s.mamba_prefill_checkpoint_alignment for s in schedulers} == {None, 1, 4}
    assert {view.kv_connector for view in grid.views} == {False, True}
    if KNOBS["disable_lookahead_block_hashes"].needs.installed:
        assert {s.num_hash_lookahead_tokens for s in schedulers} >= {0, 1}  # off, and what vLLM derives for drafters


def test_a_difference_is_a_call_that_reproduces(installed: Any) -> None:
    candidate = resolve_policy("pre-51113").split
    check = equivalence.compare(candidate, installed)
    difference = check.difference
    assert difference is not None and difference.expected != difference.got
    engine = parse_engine(difference.engine, lambda field, message: ValueError(f"{field}: {message}"))
    scheduler = build_scheduler(engine, 256, difference.kv_connector)
    request = equivalence.GridRequest()
    for name, value in difference.request.items():
        setattr(request, name, value)
    assert installed(scheduler, request, *difference.args) == difference.expected
    assert candidate(scheduler, request, *difference.args) == difference.got
    assert "reference" in difference.describe() and "candidate" in difference.describe()


def test_one_differing_corner_is_found(installed: Any) -> None:
    """Differs only with a connector's hit, a junction past it and an alignment above the hash block."""

    def corner(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
               num_external_computed_tokens: int = 0) -> int:
        answer = installed(self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
        if (num_external_computed_tokens == 3 and request.shared_prefix_boundary == 4
                and self.mamba_prefill_checkpoint_alignment == 4 and self.hash_block_size == 2):
            return answer + 1
        return answer

    difference = equivalence.compare(corner, installed).difference
    assert difference is not None and difference.got == difference.expected + 1
    assert difference.args[2] == 3 and difference.request["shared_prefix_boundary"] == 4


def test_a_split_equal_to_the_reference_is_shown_equivalent(installed: Any) -> None:
    def same(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
             num_external_computed_tokens: int = 0) -> int:
        offered = max(num_new_tokens, 0)  # a different text, the same answers
        return installed(self, request, offered, num_new_local_computed_tokens, num_external_computed_tokens)

    check = equivalence.compare(same, installed)
    assert check.equivalent and check.calls > 1_000_000 and check.views == len(equivalence.grid().views)


def test_a_split_reading_what_the_grid_does_not_vary_is_refused(installed: Any) -> None:
    def reads_more(self: Any, request: Any, num_new_tokens: int, *args: int) -> int:
        return num_new_tokens if request.use_structured_output else 0

    with pytest.raises(ValueError, match="request.use_structured_output"):
        equivalence.compare(reads_more, installed)
