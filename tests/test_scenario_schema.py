"""The published JSON Schema of a scenario file is the one the loader checks, and the corpus meets it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from fuzz.cli import main
from fuzz.model.scenario import SCHEMA_FILE, scenario_schema_text

ROOT = Path(__file__).resolve().parent.parent
SCENARIO_FILES = sorted((ROOT / "corpus").rglob("*.json")) + sorted(  # a bundle's scenarios (its case.json is the harness's)
    p for p in (ROOT / "crashes").glob("*/*.json") if p.name in ("scenario.json", "original.json"))


def test_the_committed_schema_is_the_generated_one():
    committed = (ROOT / SCHEMA_FILE).read_text()
    assert committed == scenario_schema_text(), (
        f"{SCHEMA_FILE} differs from the schema types; regenerate it: gdnfuzz schema > {SCHEMA_FILE}")


def test_gdnfuzz_schema_prints_it(capsys):
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == scenario_schema_text()


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    document = json.loads((ROOT / SCHEMA_FILE).read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


def test_every_corpus_and_bundle_scenario_meets_the_published_schema(validator):
    scenarios = SCENARIO_FILES
    assert any("corpus" in p.parts for p in scenarios)
    problems = {str(p.relative_to(ROOT)): e.message for p in scenarios
                for e in [jsonschema.exceptions.best_match(validator.iter_errors(json.loads(p.read_text())))] if e}
    assert problems == {}


@pytest.mark.parametrize(("patch", "where"), [
    ({"seed": -1}, "seed"),
    ({"requests": []}, "requests"),
    ({"engine": {"spec_decode": "medusa"}}, "spec_decode"),
    ({"requests": [{"id": "a b", "prompt": [1]}]}, "id"),
    ({"expect": {"vllm": "fine"}}, "vllm"),
])
def test_the_schema_refuses_what_the_loader_refuses(validator, patch, where):
    good = {"gdnfuzz_scenario": 1, "requests": [{"id": "a", "prompt": [3]}]}
    validator.validate(good)
    errors = list(validator.iter_errors({**good, **patch}))
    assert errors and any(where in (e.json_path + e.message) for e in errors)
