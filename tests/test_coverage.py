"""The harness's coverage probes (fuzz.search.coverage): what libFuzzer is handed is each block's hit count.

The module patched here is written to disk, so its functions have a file as vLLM's do. Whether
libFuzzer takes the counters is ``tests/test_harness.py``'s coverage test (thousands of vLLM edges).
"""

from __future__ import annotations

import os
import subprocess
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
        probes = instrument(("gdnfuzz_covtarget",), ("gdnfuzz_covtarget",), cache=root / "cache")
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


PROBED = """
import hashlib, sys
sys.path.insert(0, sys.argv[1])
from fuzz.search.coverage import instrument
probes = instrument(("gdnfuzz_covtarget",), ("gdnfuzz_covtarget",))
import gdnfuzz_covtarget as t
codes = [t.loop.__code__, t.Box.pick.__code__, t.make_closure.__code__]
print(probes.first, probes.size, [hashlib.sha1(c.co_code).hexdigest() for c in codes],
      all(probes.namespace in c.co_consts for c in codes))
"""


def test_kept_instrumentation_is_reused_and_a_bad_one_is_a_miss(tmp_path):
    """A second worker reuses the first one's probed code (the very code: atheris numbers the blocks
    differently in each process it patches in); a corrupt file or a changed module patches anew."""
    (tmp_path / "gdnfuzz_covtarget.py").write_text(textwrap.dedent(TARGET))
    cache = tmp_path / "cache"

    def probed() -> str:
        out = subprocess.run([sys.executable, "-c", PROBED, str(tmp_path)], capture_output=True, text=True,
                             check=True, env={**os.environ, "GDNFUZZ_CACHE_DIR": str(cache)})
        return out.stdout

    patched = probed()
    [kept] = cache.iterdir()
    assert probed() == patched and patched.strip().endswith("True")
    kept.write_bytes(b"not marshal")
    repatched = probed()
    assert repatched.split()[:2] == patched.split()[:2] and repatched.strip().endswith("True")
    assert kept.read_bytes() != b"not marshal" and probed() == repatched  # a miss, patched and kept again
    with open(tmp_path / "gdnfuzz_covtarget.py", "a") as f:
        f.write("\n\ndef added(x):\n    return 1 if x else 2\n")
    changed = probed()
    assert changed != patched and len(list(cache.iterdir())) == 2
