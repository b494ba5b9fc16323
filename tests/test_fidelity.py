"""The sim tier's fidelity guard: fingerprints of the vLLM functions the runner mirror copies."""

from __future__ import annotations

import json
import warnings

import pytest

import workers.sim.runner_mirror as runner_mirror
from fuzz.cli import main
from workers.sim import fidelity


def test_every_fingerprinted_function_is_named_by_the_mirror_and_matches_the_installed_vllm():
    for _, qualname in fidelity.MIRRORED:
        assert qualname.rsplit(".", 1)[-1] in runner_mirror.__doc__
    assert set(fidelity.recorded()["functions"]) == {f"{m}:{q}" for m, q in fidelity.MIRRORED}
    assert fidelity.mismatches() == []


def test_a_changed_function_is_named_warned_or_refused_under_strict(tmp_path, monkeypatch, capsys):
    data = fidelity.recorded()
    name = "vllm.v1.worker.mamba_utils:preprocess_mamba"
    data["functions"][name] = "0" * 64
    stale = tmp_path / "mirror_fingerprints.json"
    stale.write_text(json.dumps(data))
    monkeypatch.setattr(fidelity, "FINGERPRINTS", stale)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [str(m) for m in fidelity.check_mirror_fidelity(strict=False)] == [f"{name} changed"]
    assert name in str(caught[0].message)
    with pytest.raises(fidelity.FidelityError, match="preprocess_mamba changed"):
        fidelity.check_mirror_fidelity(strict=True)
    assert main(["fidelity", "--strict"]) == 2
    assert "preprocess_mamba changed" in capsys.readouterr().err
