"""``gdnfuzz export-test``: findings as pytest files that import nothing of gdnfuzz, in vLLM's test style.

The single file: the harness, the case and its test, saying what it checks and what it does here. The
suite: the harness module and one test module parametrized over the cases, vLLM's own bugs xfail(strict),
formatted and linted as vLLM's tree asks. The slow test runs the suite in a copy of vLLM's
``tests/v1/core`` layout with gdnfuzz's modules blocked: it passes on the installed vLLM, and every case
fails on the split with its bug (the vLLM bugs' cases pass on the fix, which a strict xfail counts as a
failure).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS

from fuzz.cli import main
from fuzz.errors import ExitCode
from fuzz.model.policies import PolicyError
from fuzz.report.expectation import expectation, split_shows
from fuzz.report.exported_test import SUITE_FILE, candidate_loader
from fuzz.report.literal import layout

ROOT = Path(__file__).resolve().parent.parent
FIX = f"{ROOT}/docs/upstream/checkpoint-after-midblock-resume/fix.py:split"
ALLOWED_IMPORTS = {"__future__", "collections", "hashlib", "json", "array", "dataclasses", "pathlib", "typing", "pytest", "torch",
                   "vllm"}
# vLLM's ruff settings for its tests, as far as these files need them: line length 88, vllm first-party.
VLLM_RUFF = ('line-length = 88\ntarget-version = "py310"\n[lint]\nselect = ["E", "F", "W", "I", "B", "UP", "SIM", "G"]\n'
             '[lint.isort]\nknown-first-party = ["vllm", "tests"]\n')
# Blocks gdnfuzz's packages in the pytest session that runs exported files, so they can only pass on vLLM alone.
BLOCKER = '''
import sys

class NoGdnfuzz:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fuzz", "workers", "gdnfuzz", "gdnfuzz_pytest"):
            raise ImportError(f"an exported test imported {name}")
        return None

sys.meta_path.insert(0, NoGdnfuzz())
'''
# Puts a split on every Scheduler a case builds, by the case's id (on the instance, as the sim does); the
# suite's own files never do this: they test whatever split the installed vLLM has.
SWAP_SPLIT = '''
import json
import os
import types

import pytest

@pytest.fixture(autouse=True)
def split_under_test(monkeypatch, request):
    spec = json.loads(os.environ["SPLITS_UNDER_TEST"]).get(request.node.callspec.id)
    if spec:
        # the splits under test are loaded by gdnfuzz; the cases themselves still import nothing of it
        blockers = [f for f in sys.meta_path if isinstance(f, NoGdnfuzz)]
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, NoGdnfuzz)]
        from fuzz.model.policies import load_policy  # the test's own mutants: trusted, loaded in this process
        from vllm.v1.core.sched.scheduler import Scheduler
        split, init = load_policy(spec).split, Scheduler.__init__
        sys.meta_path[:0] = blockers

        def with_split(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self._mamba_block_aligned_split = types.MethodType(split, self)

        monkeypatch.setattr(Scheduler, "__init__", with_split)
'''


def _export(path: Path, out: Path, *extra: str) -> str:
    assert main(["export-test", str(path), "--out", str(out), *extra]) == ExitCode.CLEAN
    return out.read_text()


def _imports(text: str) -> set[str]:
    tree = ast.parse(text)
    found = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return found | {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def _vllm_lint(tmp_path: Path, *files: Path) -> None:
    """ruff check and ruff format --check with vLLM's settings."""
    (tmp_path / "vllm_ruff.toml").write_text(VLLM_RUFF)
    ruff = Path(sys.executable).with_name("ruff")
    for args in (["check"], ["format", "--check"]):
        run = subprocess.run([str(ruff), *args, "--config", str(tmp_path / "vllm_ruff.toml"), *map(str, files)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr


def test_the_single_file_imports_nothing_of_gdnfuzz_and_says_what_it_checks(tmp_path, capsys):
    text = _export(CORPUS / "regressions" / "pr51113-fragmented-first-chunk.json", tmp_path / "test_seed.py")
    assert _imports(text) <= ALLOWED_IMPORTS
    tests = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert tests == ["test_split_eagle_drop_runs_past"]
    doc = " ".join(ast.get_docstring(ast.parse(text)).split())
    assert "It checks the installed vLLM's own split" in doc
    assert "it passes: vLLM's own split does not have this bug. It fails on a split that has it, e.g. `pre-51113`" \
        in doc
    assert "vllm serve '<a Gated DeltaNet hybrid, e.g. Qwen/Qwen3-Next-80B-A3B-Instruct>'" in doc
    assert "Root cause: at step 1" in doc and "vllm/v1/core/sched/scheduler.py:" in doc
    assert "pytestmark = pytest.mark.cpu_test" in text and "cached_block_hash_to_block" not in text  # public only
    out = capsys.readouterr().out
    assert "It checks the installed vLLM's own split" in out and "it passes" in out
    _vllm_lint(tmp_path, tmp_path / "test_seed.py")


def test_a_mamba2_finding_names_its_family_and_its_defect(tmp_path, capsys):
    text = _export(CORPUS / "regressions" / "internal-checkpoint-midblock-resume.json", tmp_path / "test_ckpt.py")
    doc = " ".join(ast.get_docstring(ast.parse(text)).split())
    assert "vllm serve '<a Mamba2 hybrid, e.g. nvidia/NVIDIA-Nemotron-Nano-9B-v2>'" in doc
    assert "it fails: vLLM's own split has this bug" in doc
    # the root cause says vLLM's defect (the chunk that ran past the boundary), not a disagreement of splits
    assert "vLLM's own split scheduled `r1`'s chunk [16, 65), which starts mid-block at 16" in doc
    assert "Decided at vllm/v1/core/sched/scheduler.py:" in doc and "use_internal_checkpoint = (" in doc


def test_the_candidate_split_is_checked_when_asked(tmp_path, capsys):
    text = _export(CORPUS / "regressions" / "pr51113-fragmented-first-chunk.json", tmp_path / "t.py",
                   "--checks", "candidate")
    doc = " ".join(ast.get_docstring(ast.parse(text)).split())
    assert "It checks the split `pre-51113`" in doc and "it fails: `pre-51113` has this bug" in doc
    assert "def candidate_split(" in text and _imports(text) <= ALLOWED_IMPORTS | {"types"}
    source, expression = candidate_loader("bench/mutants/one_line.py:never_defer")
    assert str(ROOT / "bench/mutants/one_line.py") in source and expression == "load_candidate_split()"
    with pytest.raises(PolicyError, match="install it and export with --checks installed"):
        candidate_loader("branch:/a/vllm/checkout")


def test_a_scenario_with_nothing_to_show_is_refused(tmp_path, capsys):
    path = CORPUS / "regressions" / "efficiency-trade-off-junction-stop.json"
    assert main(["export-test", str(path), "--out", str(tmp_path / "t.py")]) == ExitCode.BAD_INPUT
    assert "nothing to export" in capsys.readouterr().err and not (tmp_path / "t.py").exists()


@pytest.mark.parametrize(("signature", "candidate", "reference", "split", "shows"), [
    ("split-eagle-drop-runs-past", "pre-51113", "vllm", "vllm", False),
    ("split-eagle-drop-runs-past", "pre-51113", "vllm", "pre-51113", True),
    ("both-side-exception-valueerror", "pre-51113", "vllm", "vllm", True),
    ("reference-side-poison-x", "fix.py:split", "vllm", "vllm", True),
    ("reference-side-poison-x", "fix.py:split", "vllm", "fix.py:split", False),
    ("split-lcp-runs-past", "naive", "pre-51113", "vllm", None),
])
def test_which_split_shows_a_finding(signature, candidate, reference, split, shows):
    assert split_shows(signature, candidate, reference, split) is shows


def test_the_expectation_of_a_split_neither_side_is_not_guessed():
    expect = expectation("split-lcp-runs-past", "naive", "pre-51113", "installed", "0.32.0")
    assert expect.fails is None and "its result is not known" in expect.result()


def test_data_is_laid_out_as_ruff_formats_it():
    assert layout({"a": [1, 2], "b": None}, head="X = ") == ['X = {"a": [1, 2], "b": None}']
    long = {"requests": [{"id": f"r{i}", "prompt": [1600, "doc"], "max_tokens": 4} for i in range(3)]}
    assert layout(long, head="CASE = ")[:3] == ["CASE = {", '    "requests": [',
                                                 '        {"id": "r0", "prompt": [1600, "doc"], "max_tokens": 4},']
    assert layout(((3, 512),), head="S = ") == ["S = ((3, 512),)"]


SUITE = [  # (corpus regression, the split it fails on); the vLLM bugs fail on vLLM itself and pass on the fix
    ("pr51113-concurrent-prefills", "pre-51113"),  # the seed bug: vLLM's split is the fix
    ("efficiency-drop-junction-stop-lost-hit", f"{ROOT}/bench/mutants/drop_junction_stop.py:split"),  # a cost
    ("connector-external-start-minimized", f"{ROOT}/bench/mutants/ignore_external_start.py:split"),  # a connector
]
VLLM_BUGS = ["internal-checkpoint-midblock-resume", "connector-pool-accounting-valueerror-no-spec"]


def test_the_suite_is_one_harness_and_one_module_of_cases(tmp_path, capsys):
    core = tmp_path / "tests" / "v1" / "core"
    files = [CORPUS / "regressions" / f"{name}.json" for name, _ in SUITE[:1]] + \
        [CORPUS / "regressions" / f"{name}.json" for name in VLLM_BUGS]
    assert main(["export-test", "--suite", *map(str, files), "--out", str(core)]) == ExitCode.CLEAN
    cases_file = Path(SUITE_FILE).with_suffix(".json").name
    assert sorted(p.name for p in core.iterdir()) == sorted(["__init__.py", "mamba_align_replay.py", SUITE_FILE,
                                                             cases_file])
    text = (core / SUITE_FILE).read_text()
    assert "pytestmark = pytest.mark.cpu_test" in text and "from .mamba_align_replay import suite_test" in text
    assert _imports(text) == {"pytest", "mamba_align_replay"}  # the harness, beside it
    entries = json.loads((core / cases_file).read_text())
    assert [e["id"] for e in entries] == [p.stem for p in files]
    assert [e["xfail"] is not None for e in entries] == [False, True, True]
    assert "vllm-project/vllm#46892" in entries[1]["xfail"] + entries[2]["xfail"]  # the upstream report named
    assert _imports((core / "mamba_align_replay.py").read_text()) <= ALLOWED_IMPORTS
    assert "3 cases of the installed vLLM's split; 1 pass on it, 2 are vLLM's own bugs" in capsys.readouterr().out
    _vllm_lint(tmp_path, core / SUITE_FILE, core / "mamba_align_replay.py")


def test_a_suite_needs_an_out_directory_and_checks_the_installed_split(tmp_path, capsys):
    path = str(CORPUS / "regressions" / "pr51113-concurrent-prefills.json")
    assert main(["export-test", "--suite", path]) == ExitCode.BAD_INPUT
    assert main(["export-test", "--suite", path, "--out", str(tmp_path), "--checks", "candidate"]) == \
        ExitCode.BAD_INPUT
    assert "checks the installed vLLM's split" in capsys.readouterr().err
    assert main(["export-test", "--suite", path, "--out", str(tmp_path / "not-a-package")]) == ExitCode.BAD_INPUT
    assert "must be a package name" in capsys.readouterr().err and not (tmp_path / "not-a-package").exists()


def _pytest(root: Path, splits: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One pytest session over the suite in ``root``'s vLLM layout, each case under its split in ``splits``
    (by id; none: the installed vLLM's), gdnfuzz's modules blocked but for loading those splits."""
    (root / "conftest.py").write_text(BLOCKER + (SWAP_SPLIT if splits else ""))
    env = {"PATH": "/usr/bin:/bin", "SPLITS_UNDER_TEST": json.dumps(splits), "HOME": str(root)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           str(root / "tests" / "v1" / "core" / SUITE_FILE)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_the_suite_passes_on_vllm_and_fails_on_each_bug_in_vllms_layout(tmp_path, capsys):
    """Two pytest sessions: the installed split (the cases pass, vLLM's bugs xfail strict), then each case
    under the split with its bug (each fails; vLLM's bugs' cases pass on the fix: a strict XPASS fails)."""
    for package in ("tests", "tests/v1"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    cpu_test: runs on CPU (vLLM's marker)\n")
    files = [CORPUS / "regressions" / f"{name}.json" for name, _ in SUITE] + \
        [CORPUS / "regressions" / f"{name}.json" for name in VLLM_BUGS]
    out = str(tmp_path / "tests/v1/core")
    assert main(["export-test", "--suite", *map(str, files), "--out", out]) == ExitCode.BAD_INPUT
    assert "never loads a policy a file names" in capsys.readouterr().err  # the corpus names bench mutants
    assert main(["export-test", "--suite", *map(str, files), "--out", out, "--trust-named-policies"]) == \
        ExitCode.CLEAN
    installed = _pytest(tmp_path, {})
    assert installed.returncode == 0, installed.stdout[-3000:]
    assert f"{len(SUITE)} passed, {len(VLLM_BUGS)} xfailed" in installed.stdout, installed.stdout[-3000:]
    buggy = _pytest(tmp_path, {**dict(SUITE), **{name: FIX if "checkpoint" in name else "vllm"
                                                  for name in VLLM_BUGS}})
    lines = buggy.stdout.splitlines()
    for name in [*dict(SUITE), "internal-checkpoint-midblock-resume"]:
        assert any(line.startswith("FAILED ") and f"[{name}]" in line for line in lines), buggy.stdout[-3000:]
    # each failed on its assert (no error of the harness), and the fixed vLLM bug as a strict XPASS
    assert sum(bool(re.match(r"E\s+AssertionError", line)) for line in lines) == len(SUITE), buggy.stdout[-3000:]
    assert "[XPASS(strict)]" in buggy.stdout
    assert any(line.startswith("XFAIL ") and "[connector-pool-accounting-valueerror-no-spec]" in line
               for line in lines), buggy.stdout[-3000:]  # no split fixes the manager's bug
