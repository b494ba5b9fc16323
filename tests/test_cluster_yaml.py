"""ray_cluster.yaml is a valid Ray cluster-launcher file for a GPU cluster, by Ray's own schema."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Path(ray.autoscaler.__file__).parent / "ray-schema.json"


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())


def test_file_validates_against_rays_schema(config):
    jsonschema.validate(config, json.loads(SCHEMA.read_text()))


def test_config_as_ray_up_prepares_it_validates(config):
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    assert prepared["head_node_type"] in prepared["available_node_types"]


def test_node_types_cpu_head_gpu_workers_and_bounds(config):
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    gpu = [t for name, t in types.items() if t["resources"].get("GPU", 0) >= 1]
    assert len(gpu) == 1 and gpu[0]["resources"]["GPU"] == 1
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    assert all(0 <= t["min_workers"] <= t["max_workers"] for t in workers)
    assert sum(t["max_workers"] for t in workers) <= config["max_workers"]


def test_setup_installs_the_gpu_extra_and_mounts_shared_storage(config):
    setup = "\n".join(config["setup_commands"])
    assert "pip install -e '.[gpu]'" in setup
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "gpu" in extras
    assert config["file_mounts"] == {"~/gdnfuzz": "."}
    assert "mount -t nfs4" in setup
    for var, path in [("GDNFUZZ_CORPUS", "/mnt/gdnfuzz/corpus"), ("GDNFUZZ_CRASHES", "/mnt/gdnfuzz/crashes")]:
        assert f"export {var}={path}" in setup
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all(cmd.startswith("source ~/gdnfuzz.env") for cmd in starts)


def test_the_schema_check_rejects_a_misspelt_node_type_field(config):
    broken = copy.deepcopy(config)
    broken["available_node_types"]["worker.gpu"]["resource"] = broken["available_node_types"]["worker.gpu"].pop(
        "resources"
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, json.loads(SCHEMA.read_text()))
