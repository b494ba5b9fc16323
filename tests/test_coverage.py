"""The harness's coverage probes (fuzz.search.coverage): what libFuzzer is handed is each block's hit count.

The module patched here is written to disk, so its functions have a file as vLLM's do. Whether
libFuzzer takes the counters is ``tests/test_harness.py``'s coverage test (thousands of vLLM edges).
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from fuzz.search.coverage import MAX_COUNT, instrument

TARGET = '''
import functools


def loop(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
    return total


def logged(function):
    @functools.wraps(function)
    def wrapper(*args):
        return function(*args)
    return wrapper


@logged
def decorated(x):
    return -x if x < 0 else x


def make_closure(k):
    def closure(x):
        return x + k if x else k
    return closure


class Box:
    def __init__(self, value):
        self.value = value

    @property
    def doubled(self):
        return 2 * self.value if self.value else 0

    @staticmethod
    def pick(a, b):
        return a if a > b else b

    class Inner:
        def answer(self):
            return 42 if self else 0
'''


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    root = tmp_path_factory.mktemp("covtarget")
    (root / "gdnfuzz_covtarget.py").write_text(textwrap.dedent(TARGET))
    sys.path.insert(0, str(root))
    try:
        probes = instrument(("gdnfuzz_covtarget",), ("gdnfuzz_covtarget",))
        yield probes, sys.modules["gdnfuzz_covtarget"]
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("gdnfuzz_covtarget", None)


def counts_of(probes, call):
    probes.hits.clear()
    result = call()
    probes.flush()
    return result, probes.counts.copy()


def test_counts_are_per_input_hit_counts(patched):
    probes, target = patched
    result, ten = counts_of(probes, lambda: target.loop(10))
    assert result == 25  # the patched function computes what it did
    _, again = counts_of(probes, lambda: target.loop(10))
    assert (ten == again).all()  # a flush starts the next input from zero
    _, eleven = counts_of(probes, lambda: target.loop(11))
    assert (eleven >= ten).all() and (eleven != ten).any()
    _, none = counts_of(probes, lambda: None)
    assert not none.any()


def test_counts_saturate_at_255(patched):
    probes, target = patched
    _, counts = counts_of(probes, lambda: target.loop(1000))
    assert counts.max() == MAX_COUNT


@pytest.mark.parametrize("call", [
    lambda t: t.decorated(-3),
    lambda t: t.make_closure(2)(5),
    lambda t: t.Box(4).doubled,
    lambda t: t.Box.pick(1, 2),
    lambda t: t.Box.Inner().answer(),
    lambda t: t.Box(1).value,  # __init__
])
def test_every_kind_of_function_is_probed(patched, call):
    probes, target = patched
    _, counts = counts_of(probes, lambda: call(target))
    assert counts.any()


def test_branches_show_as_different_blocks(patched):
    probes, target = patched
    _, negative = counts_of(probes, lambda: target.decorated(-3))
    _, positive = counts_of(probes, lambda: target.decorated(3))
    assert (negative != positive).any()


def test_code_outside_the_prefixes_is_left_alone(patched):
    import json

    probes, _ = patched
    _, counts = counts_of(probes, lambda: json.dumps({"a": [1, 2, 3]}))
    assert not counts.any()
    assert "__ATHERIS_INSTRUMENTED__" not in json.dumps.__code__.co_consts
