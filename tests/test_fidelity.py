"""The sim tier's fidelity guard: fingerprints of the vLLM functions the runner mirror still copies."""

from __future__ import annotations

import json
import warnings

import pytest

import workers.sim.runner_mirror as runner_mirror
from fuzz.cli import main
from workers.sim import fidelity

POSTPROCESS = "vllm.v1.worker.mamba_utils:postprocess_mamba_fused_kernel"


def test_every_fingerprinted_function_is_named_by_the_mirror_and_matches_the_installed_vllm():
    mirrored = runner_mirror.__doc__.split("Mirrored", 1)[1]
    for _, qualname in fidelity.MIRRORED:
        assert qualname.rsplit(".", 1)[-1] in mirrored
    names = {f"{m}:{q}" for m, q in fidelity.MIRRORED}
    assert all(set(functions) == names for functions in fidelity.recorded().values())
    assert {"0.32.0", "0.33.0"} <= set(fidelity.recorded())
    assert fidelity.mismatches() == []


def test_what_the_mirror_calls_is_not_fingerprinted():
    called = runner_mirror.__doc__.split("Mirrored", 1)[0]
    for function in ("preprocess_mamba", "MambaPrefillCheckpointBuilder.build", "get_temporal_copy_spec"):
        assert function in called
        assert all(not q.endswith(function) for _, q in fidelity.MIRRORED)


def _stale(tmp_path, monkeypatch) -> None:
    checked = fidelity.recorded()
    for functions in checked.values():
        functions[POSTPROCESS] = "0" * 64
    stale = tmp_path / "mirror_fingerprints.json"
    stale.write_text(json.dumps({"checked": checked}))
    monkeypatch.setattr(fidelity, "FINGERPRINTS", stale)


def test_a_changed_function_is_named_warned_or_refused_under_strict(tmp_path, monkeypatch, capsys):
    _stale(tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [str(m) for m in fidelity.check_mirror_fidelity(strict=False)] == [f"{POSTPROCESS} changed"]
    assert POSTPROCESS in str(caught[0].message) and "0.32.0, 0.33.0" in str(caught[0].message)
    with pytest.raises(fidelity.FidelityError, match="postprocess_mamba_fused_kernel changed"):
        fidelity.check_mirror_fidelity(strict=True)
    assert main(["fidelity", "--strict"]) == 2
    assert "postprocess_mamba_fused_kernel changed" in capsys.readouterr().err


@pytest.mark.parametrize(("ci", "asked", "strict"), [(None, None, False), ("true", None, True), ("1", None, True),
                                                    ("true", "0", False), (None, "1", True), ("false", None, False)])
def test_a_ci_run_is_strict_unless_asked_not_to_be(monkeypatch, ci, asked, strict):
    for name, value in ((fidelity.CI_ENV, ci), (fidelity.STRICT_ENV, asked)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert fidelity.strict_from_env() is strict


def test_recording_adds_the_installed_version_and_keeps_the_others(tmp_path, monkeypatch):
    from fuzz.model.vllm_build import installed_vllm

    stale = tmp_path / "mirror_fingerprints.json"
    stale.write_text(json.dumps({"checked": {"0.1.0": {POSTPROCESS: "0" * 64}}}))
    monkeypatch.setattr(fidelity, "FINGERPRINTS", stale)
    fidelity.record()
    assert set(fidelity.recorded()) == {"0.1.0", installed_vllm().version}
    assert fidelity.mismatches() == []
