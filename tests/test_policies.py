"""Policy resolution: built-ins, module:attr, file.py:attr, a vLLM checkout, and bad signatures (every form
that is not built in through the session's sandbox, ``tests/conftest.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fuzz.model.policies import BUILTINS, PolicyError, load_policy, resolve_policy


def test_builtins_resolve():
    for name in BUILTINS:
        assert resolve_policy(name).name == name


def test_module_attr():
    assert resolve_policy("fuzz.model.policies:_naive_split").split(None, None, 7) == 7


def test_file_attr_and_bad_signature(tmp_path):
    good = tmp_path / "mine.py"
    good.write_text(
        "def split(self, request, num_new_tokens, num_new_local_computed_tokens=0,"
        " num_external_computed_tokens=0):\n    return num_new_tokens // 2\n"
        "def wrong(self, request):\n    return 0\n"
    )
    assert resolve_policy(f"{good}:split").split(None, None, 10) == 5
    with pytest.raises(PolicyError, match="does not fit"):
        resolve_policy(f"{good}:wrong")
    with pytest.raises(PolicyError, match="no attribute"):
        resolve_policy(f"{good}:missing")
    with pytest.raises(PolicyError, match="unknown policy"):
        resolve_policy("no-such-policy")


def test_checkout_directory(tmp_path):
    import vllm

    installed = Path(vllm.__file__).parent / "v1/core/sched/scheduler.py"
    target = tmp_path / "vllm/v1/core/sched/scheduler.py"
    target.parent.mkdir(parents=True)
    shutil.copy(installed, target)
    policy = resolve_policy(str(tmp_path))  # compiled in its sandbox child; found there at the checkout's line
    assert policy.sandboxed and policy.defined_at()[0] == str(target)
    assert load_policy(str(tmp_path)).split.__code__.co_filename == str(target)  # trusted code: in-process
    with pytest.raises(PolicyError, match="not a vLLM checkout"):
        resolve_policy(str(tmp_path / "vllm"))
