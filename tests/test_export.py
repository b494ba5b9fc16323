"""``gdnfuzz export-test``: a finding as a pytest file that imports nothing of gdnfuzz, fails on the buggy
split and passes on the fixed one (the slow tests run the exported files with pytest)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS

from fuzz.cli import main
from fuzz.errors import ExitCode

FIX = "docs/upstream/checkpoint-after-midblock-resume/fix.py:split"
ROOT = Path(__file__).resolve().parent.parent
# Replaces vLLM's split in a pytest session, per exported file, to run exported tests against other splits (the
# exported file itself never does this: it tests whatever split the installed vLLM has).
SWAP_SPLIT = '''
import json
import os
from pathlib import Path

import pytest

@pytest.fixture(autouse=True)
def split_under_test(monkeypatch, request):
    spec = json.loads(os.environ["SPLITS_UNDER_TEST"]).get(Path(request.path).name)
    if spec:
        from fuzz.model.policies import resolve_policy
        from vllm.v1.core.sched.scheduler import Scheduler
        monkeypatch.setattr(Scheduler, "_mamba_block_aligned_split", resolve_policy(spec).split)
'''


def _export(path: Path, out: Path, *extra: str) -> str:
    assert main(["export-test", str(path), "--out", str(out), *extra]) == ExitCode.CLEAN
    return out.read_text()


def test_the_exported_file_imports_nothing_of_gdnfuzz_and_names_the_finding(tmp_path, capsys):
    text = _export(CORPUS / "regressions" / "pr51113-fragmented-first-chunk.json", tmp_path / "test_seed.py")
    tree = ast.parse(text)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "hashlib", "json", "array", "dataclasses", "typing", "pytest", "torch", "vllm"}
    tests = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    assert tests == ["test_split_eagle_drop_runs_past"]
    assert "vllm serve" in text and "--mamba-cache-mode align" in text and "Root cause: at step 1" in text


def test_a_scenario_with_nothing_to_show_is_refused(tmp_path, capsys):
    path = CORPUS / "regressions" / "efficiency-trade-off-junction-stop.json"
    assert main(["export-test", str(path), "--out", str(tmp_path / "t.py")]) == ExitCode.BAD_INPUT
    assert "nothing to export" in capsys.readouterr().err and not (tmp_path / "t.py").exists()


def _pytest(tests: list[Path], splits: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    """One pytest session over the exported ``tests``, each file under its split in ``splits`` (by file name;
    None: the installed vLLM's)."""
    (tests[0].parent / "conftest.py").write_text(SWAP_SPLIT)
    env = {"PATH": "/usr/bin:/bin", "SPLITS_UNDER_TEST": json.dumps(splits), "HOME": str(tests[0].parent)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *map(str, tests)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


EXPORTED = [  # (corpus regression, the split it fails on, the split it passes on); None: the installed vLLM's
    ("pr51113-concurrent-prefills", "pre-51113", None),  # the seed bug: vLLM's split is the fix
    ("efficiency-drop-junction-stop-lost-hit", "bench/mutants/drop_junction_stop.py:split", None),  # a cost
    ("internal-checkpoint-midblock-resume", None, FIX),  # vLLM's own bug: fails as installed, passes fixed
]


@pytest.mark.slow
def test_the_exported_tests_fail_on_the_bug_and_pass_on_the_fix(tmp_path, capsys):
    """Every case in two pytest sessions (one on the buggy splits, one on the fixed), not two each."""
    tests = {name: tmp_path / f"test_{name.replace('-', '_')}.py" for name, _, _ in EXPORTED}
    for name, test in tests.items():
        _export(CORPUS / "regressions" / f"{name}.json", test)
    failing = _pytest(list(tests.values()), {tests[name].name: buggy for name, buggy, _ in EXPORTED})
    passing = _pytest(list(tests.values()), {tests[name].name: fixed for name, _, fixed in EXPORTED})
    assert failing.returncode == 1 and f"{len(EXPORTED)} failed" in failing.stdout, failing.stdout[-3000:]
    assert passing.returncode == 0 and f"{len(EXPORTED)} passed" in passing.stdout, passing.stdout[-3000:]
    for test in tests.values():
        assert any(line.startswith("FAILED ") and f"{test.name}::" in line for line in failing.stdout.splitlines())
        assert any(line.startswith("PASSED ") and f"{test.name}::" in line for line in passing.stdout.splitlines())
