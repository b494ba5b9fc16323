"""The CI files as shipped: the composite action, the workflow that uses it, and the Buildkite step in
vLLM's ``.buildkite/test-pipeline.yaml`` form.

Nothing here runs them (that needs GitHub's runners and vLLM's Buildkite agents); it checks what can be
checked on this machine: they parse, their keys are the ones their runners read, every action is pinned
by a full commit SHA with its version in a comment, gdnfuzz is pinned to this version, SARIF goes to code
scanning only where the token can write security events, the reports are kept as artifacts whatever the
exit code, and every ``gdnfuzz ci`` flag they pass is one the real parser takes.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import yaml

from fuzz import HOMEPAGE
from fuzz.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / ".github" / "actions" / "gdnfuzz" / "action.yml"
WORKFLOW = ROOT / ".github" / "workflows" / "gdnfuzz.yml"
BUILDKITE = ROOT / "ci" / "buildkite-gdnfuzz.yml"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
# the keys of a step in vLLM's test-pipeline.yaml that its pipeline generator reads
VLLM_STEP_KEYS = {"label", "timeout_in_minutes", "working_dir", "source_file_dependencies", "commands", "no_gpu",
                  "gpu", "num_gpus", "mirror_hardwares", "optional", "fast_check", "torch_nightly", "parallelism"}


PINNED = re.compile(r"uses: ([\w.-]+/[\w./-]+)@([0-9a-f]{40})  # v\d+\.\d+\.\d+")
# gdnfuzz's own release commit is not published yet: the workflow names the placeholder it must be replaced by
GDNFUZZ_PLACEHOLDER = f"GDNFUZZ_V{VERSION.replace('.', '_')}_COMMIT_SHA"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _uses_lines(path: Path) -> list[str]:
    return [line.strip().removeprefix("- ") for line in path.read_text().splitlines()
            if line.strip().removeprefix("- ").startswith("uses:")]


def _split_on(words: list[str], separator: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for word in words:
        if word == separator:
            parts.append([])
        else:
            parts[-1].append(word)
    return parts


def _ci_options() -> set[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {s for a in sub.choices["ci"]._actions for s in a.option_strings}


def test_the_action_is_composite_with_pinned_actions_and_declared_inputs():
    action = _load(ACTION)
    assert action["runs"]["using"] == "composite" and {"name", "description", "inputs"} <= set(action)
    for step in action["runs"]["steps"]:
        assert ("run" in step) != ("uses" in step), step
        if "run" in step:
            assert step["shell"] == "bash", step.get("name")
        else:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
    assert all(PINNED.fullmatch(line) for line in _uses_lines(ACTION)), _uses_lines(ACTION)  # a SHA, its version
    used = set(re.findall(r"inputs\.([\w-]+)", ACTION.read_text()))
    assert used == set(action["inputs"])  # every input read is declared, and every one declared is read
    assert action["outputs"]["exit-code"]["value"] == "${{ steps.ci.outputs.exit-code }}"


def test_the_action_installs_gdnfuzz_from_its_own_commit_and_passes_only_flags_ci_takes():
    steps = {s.get("id") or s["name"]: s for s in _load(ACTION)["runs"]["steps"] if "name" in s or "id" in s}
    install = next(s for s in steps.values() if "pip install" in s.get("run", ""))
    assert install["env"]["GDNFUZZ_SRC"] == "${{ github.action_path }}/../../.."
    assert '"$GDNFUZZ_SRC[cpu,issues]"' in install["run"] and "download.pytorch.org/whl/cpu" in install["run"]
    script = steps["ci"]["run"]
    assert "gdnfuzz ci" in script and '"$GDNFUZZ_SRC/corpus"' in script
    flags = set(re.findall(r"(?<![\w-])(--[a-z-]+|-j)(?= )", script))
    assert {"--base", "--checkout", "--candidate", "--out"} <= flags <= _ci_options()


def test_sarif_goes_to_code_scanning_only_where_the_token_may_write_and_is_always_kept_as_an_artifact():
    steps = _load(ACTION)["runs"]["steps"]
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@"))
    condition = " ".join(upload["if"].split())
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition  # not a fork
    assert "github.actor != 'dependabot[bot]'" in condition and "inputs.upload-sarif == 'always'" in condition
    artifact = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert artifact["if"] == "always()" and "gdnfuzz.sarif" in artifact["with"]["path"]
    assert steps[-1]["run"] == 'exit "${STATUS:-5}"'  # the job ends with gdnfuzz's own exit code


def test_the_workflow_uses_the_action_at_this_version_with_the_history_the_base_needs():
    text = WORKFLOW.read_text()
    workflow = _load(WORKFLOW)
    assert "GDNFUZZ_VERSION" not in text
    assert set(workflow[True]) == {"pull_request", "workflow_dispatch"}  # YAML 1.1 reads `on` as true
    [job] = workflow["jobs"].values()
    checkout, gdnfuzz = job["steps"]
    assert PINNED.fullmatch(_uses_lines(WORKFLOW)[0]) and checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["fetch-depth"] == 1  # the action fetches the base commit alone
    owner_repo, _, ref = gdnfuzz["uses"].partition("@")
    assert ref == GDNFUZZ_PLACEHOLDER and f"@{GDNFUZZ_PLACEHOLDER}  # v{VERSION}" in _uses_lines(WORKFLOW)[1]
    assert owner_repo.endswith("/.github/actions/gdnfuzz")
    assert (ROOT / owner_repo.split("/", 2)[2] / "action.yml").is_file()
    assert set(gdnfuzz["with"]) <= set(_load(ACTION)["inputs"])
    assert workflow["permissions"]["security-events"] == "write"


def test_the_buildkite_step_is_in_vllm_test_pipeline_form_scoped_to_the_scheduling_code():
    [step] = _load(BUILDKITE)["steps"]
    assert set(step) <= VLLM_STEP_KEYS and {"label", "source_file_dependencies", "commands"} <= set(step)
    assert step["source_file_dependencies"] == ["vllm/v1/core/", "vllm/model_executor/layers/mamba/",
                                                "vllm/v1/kv_cache_interface.py"]
    assert all(isinstance(c, str) for c in step["commands"])
    assert step["commands"][0] == f"export GDNFUZZ_REF=v{VERSION}"
    [command] = [c for c in step["commands"] if c.startswith("gdnfuzz ci ")]
    # Buildkite's `$$` defers a `$` to the agent's shell; the substitutions stand in as plain words
    words = shlex.shlex(re.sub(r"\$\$\([^)]*\)", "REV", command).replace("$$", "$"), posix=True,
                        punctuation_chars=";")
    words.whitespace_split = True
    ci, status, upload, end = (" ".join(part).split() for part in _split_on(list(words), ";"))
    # the reports go up whatever gdnfuzz's exit code, which the step then ends with
    assert status == ["status=$?"] and end == ["exit", "$status"] and upload[:3] == ["buildkite-agent", "artifact",
                                                                                     "upload"]
    assert set(upload[3].split(";")) == {"gdnfuzz-out/junit.xml", "gdnfuzz-out/gdnfuzz.sarif",
                                         "gdnfuzz-out/summary.md", "gdnfuzz-out/crashes/**/*"}
    argv = ci
    args = build_parser().parse_args(argv[1:])
    assert (args.candidate, args.base, args.checkout) == ("vllm", "REV", ".")  # code-change form, PR build


def test_the_package_says_where_it_lives_and_what_it_is():
    assert PROJECT["urls"]["Homepage"] == HOMEPAGE  # SARIF's informationUri names the same home
    assert "Framework :: Pytest" in PROJECT["classifiers"] and PROJECT["license"]
