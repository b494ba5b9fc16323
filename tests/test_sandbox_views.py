"""The views a sandboxed split reads the scheduler and the request through (``fuzz.sandbox.views``), both sides in
this process: the deciding side's snapshot and answers, the child's views of them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fuzz.sandbox.views import SNAPSHOT, Known, Written, identities, lookup, snapshot, views


class Obj:
    """A deciding process's object (weakly referenceable, as vLLM's are: its serial lives as long as it does)."""

    def __init__(self, **attributes: Any):
        self.__dict__.update(attributes)


def _roots() -> dict[str, Any]:
    scheduler = Obj(cache_config=Obj(block_size=16), block_size=16, hash_block_size=8,
                    mamba_partial_cache_hit=True, max_num_scheduled_tokens=512,
                    scheduler_config=Obj(long_prefill_token_threshold=0),
                    need_mamba_block_aligned_split=True, extra=[1, 2, 3])
    request = Obj(request_id="r1", num_computed_tokens=32, num_prompt_tokens=100, num_tokens=107,
                  shared_prefix_boundary=0, num_output_tokens=7, prompt_token_ids=[5, 6, 7], by_id={1: 6})
    return {"self": scheduler, "request": request}


class Call:
    """One split call as the child makes it: the snapshot through JSON, views over it, asks counted."""

    def __init__(self, roots: dict[str, Any], written: Written):
        self.asked: list[Any] = []
        answer = lookup(roots)
        sent = json.loads(json.dumps(snapshot(roots)))

        def ask(question: Any) -> Any:
            self.asked.append(question["get"])
            return json.loads(json.dumps(answer(question)))

        self.scheduler, self.request = views(ask, Known(sent), identities(roots), written)


def test_what_vllms_split_reads_crosses_with_the_call_and_reads_as_the_object_has_it():
    roots = _roots()
    call = Call(roots, Written())
    for root, names in SNAPSHOT:
        view, real = (call.scheduler, roots["self"]) if root == "self" else (call.request, roots["request"])
        for name in names:
            view, real = getattr(view, name, AttributeError), getattr(real, name, AttributeError)
        if real is not AttributeError and not isinstance(real, Obj):
            assert view == real, (root, names)
    present = [q for q in call.asked if not q[-1][1].startswith(("use_", "mamba_has", "mamba_prefill", "mamba_shared"))]
    assert present == []  # only the paths these objects lack were asked for (and raised)
    assert call.request.prompt_token_ids[1] == 6 and call.scheduler.extra == [1, 2, 3]  # plain: they cross whole
    assert call.request.by_id[1] == 6 and call.request.by_id[1] == 6  # an object's item: asked once a call
    assert call.asked.count(["request", ["a", "by_id"], ["i", 1]]) == 1


def test_a_path_the_object_lacks_raises_in_the_child_as_reading_it_did():
    call = Call(_roots(), Written())
    with pytest.raises(AttributeError, match="use_eagle"):
        _ = call.scheduler.use_eagle
    with pytest.raises(AttributeError):
        _ = call.scheduler.__globals__
    assert ["self", ["a", "__globals__"]] not in call.asked  # a dunder is never asked for


def test_writes_stay_in_the_child_for_the_objects_life_and_deletes_hide_what_the_snapshot_sent():
    roots, written = _roots(), Written()
    first = Call(roots, written)
    first.scheduler.note = 1
    first.scheduler.cache_config.block_size = 4
    del first.request.num_tokens
    assert first.scheduler.note == 1 and first.scheduler.cache_config.block_size == 4
    with pytest.raises(AttributeError, match="deleted"):
        _ = first.request.num_tokens
    later = Call(roots, written)  # the same objects, a later call
    assert later.scheduler.note == 1 and later.scheduler.cache_config.block_size == 4
    with pytest.raises(AttributeError, match="deleted"):
        _ = later.request.num_tokens
    other = Call(_roots(), written)  # other objects: nothing written on them
    assert other.scheduler.cache_config.block_size == 16 and other.request.num_tokens == 107
    assert not hasattr(other.scheduler, "note")
    assert roots["request"].num_tokens == 107 and roots["self"].cache_config.block_size == 16
