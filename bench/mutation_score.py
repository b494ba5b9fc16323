"""Mutation score: which mutants of vLLM's split three checks kill, side by side.

- **suite**: what ``gdnfuzz export-test --suite corpus/regressions`` writes, run with pytest in a scratch
  copy of vLLM's ``tests/v1/core`` layout, the mutant put on every Scheduler a case builds (on the
  instance, as the sim tier does);
- **vllm-test**: vLLM's own test of the split, a file you pass (``--vllm-test``, e.g. vLLM's
  ``tests/v1/core/test_mamba_align_chunk_split.py``; it stays out of this repository), in the same
  layout, the mutant put on the Scheduler class (the test calls the class's split on a stub; a stub gets
  the three attributes 0.32.0's split reads that it predates: ``INSTALL``). Its one import from vLLM's
  test helpers, ``create_requests``, is given by a stand-in written here (``CREATE_REQUESTS``: one request
  of ``num_tokens`` copies of its index, sha256 block hashes);
- **fuzz**: ``gdnfuzz run --candidate <mutant> --reference vllm --fail-on any --max-time S`` from an empty
  corpus (``--fuzz-time``, default 90 s, start-up included).

A check kills a mutant where its result differs from its result on the installed split: a test whose
outcome changes (passed, failed, xfailed), or a fuzzing run with a finding of the mutant's own (a
``both-side-``/``reference-side-`` one is vLLM's and does not count). The mutants are ``--mutants
FILE.py:ATTR``, a list of ``(name, split)`` or a function returning one (``bench/split_mutants.py``'s
generated set, say); by default ``interim_mutants()``: ``bench/mutants/one_line.py``'s seven, the
one-line mutants of ``OWN``, and ``pre-51113``. Prints the kill matrix and each check's score; ``--json``
writes it. Asserts nothing.

    .venv/bin/python bench/mutation_score.py --vllm-test /tmp/vllm-tests/test_mamba_align_chunk_split.py
    .venv/bin/python bench/mutation_score.py --vllm-test ... --mutants bench/split_mutants.py:MUTANTS --fuzz-time 0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GDNFUZZ = str(Path(sys.executable).with_name("gdnfuzz"))
CORE = Path("tests/v1/core")
SUITE_FILE = "test_mamba_align_fuzz_regressions.py"  # fuzz.report.exported_test.SUITE_FILE

# One-line mutants of the installed split written for this benchmark (old text -> new text), beside
# bench/mutants/one_line.py's: each changes one condition, bound or operand of a stop.
OWN = {
    "aligned_end_rounds_up": ("aligned_end = end // block_size * block_size",
                              "aligned_end = -(-end // block_size) * block_size"),
    "next_boundary_one_past": ("next_block_boundary = (start // block_size + 1) * block_size",
                               "next_block_boundary = (start // block_size + 1) * block_size + 1"),
    "no_lcp_stop": ("        # Never run past the last cacheable block boundary mid-chunk.\n        last_cache_position,\n",
                    "        # Never run past the last cacheable block boundary mid-chunk.\n        0,\n"),
    "stop_at_start": ("end = min((s for s in stops if start < s < end), default=end)",
                      "end = min((s for s in stops if start <= s < end), default=end)"),
    "checkpoint_on_any_chunk": ("and end >= prefill_end\n", "and end >= start\n"),
    "tail_stop_inclusive": ("if last_cache_position < tail_boundary < request.num_prompt_tokens",
                            "if last_cache_position <= tail_boundary <= request.num_prompt_tokens"),
    "sub_block_always": ("if aligned_end > start or block_size <= max_prefill_tokens:", "if aligned_end > start:"),
    "long_prefill_ignored": ("if long_prefill_threshold > 0:", "if long_prefill_threshold < 0:"),
    "junction_floored": ("junction_stop if start < junction < end else 0",
                         "block_floored if start < junction < end else 0"),
    "lcp_without_eagle_drop": ("        block_size,\n        self.use_eagle_block_drop,\n",
                               "        block_size,\n        False,\n"),
    "checkpoint_position_hash_block": ("        prefill_end,\n        ckpt_block_size,",
                                       "        prefill_end,\n        self.hash_block_size,"),
    "prefill_end_prompt_minus_one": ("prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)",
                                     "prefill_end = max(request.num_prompt_tokens - 1, request.num_tokens - 1)"),
    "end_at_prefill_end_aligned": ("    if end < prefill_end:\n", "    if end <= prefill_end:\n"),
    "start_ignores_local_hits": ("        + num_new_local_computed_tokens\n", "        + 0\n"),
    "junction_past_prompt": ("and junction <= request.num_prompt_tokens", "and junction <= request.num_tokens"),
}
# vLLM's tests/v1/core/utils.py has create_requests; this stand-in makes what the split test asks of it.
CREATE_REQUESTS = '''
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request


def create_requests(num_requests, num_tokens=10, max_tokens=16, block_size=16, **_):
    init_none_hash(sha256)
    hasher = get_request_block_hasher(block_size, sha256)
    params = SamplingParams(max_tokens=max_tokens)
    return [Request(f"{i}", [i] * num_tokens, params, None, block_hasher=hasher) for i in range(num_requests)]
'''
# Puts the mutant of $MUTANT_SHIM (none: the installed split) on vLLM's Scheduler: on each instance
# ($MUTANT_ON=instance) or on the class ($MUTANT_ON=class). On the class, a stub the test passes as `self`
# gets the three attributes 0.32.0's split reads that its stub predates, at what a Scheduler of the
# test's configuration holds (block_size: the Mamba block; no shared-prefix checkpoints; Mamba2's
# checkpoint alignment 1): without them every case raises AttributeError on the installed split.
INSTALL = """
import os
import runpy
import types

import pytest


def stub_defaults(stub):
    return {"block_size": stub.cache_config.block_size, "mamba_shared_prefix_checkpoint": False,
            "mamba_prefill_checkpoint_alignment": 1}


@pytest.fixture(autouse=True)
def mutant(monkeypatch):
    from vllm.v1.core.sched.scheduler import Scheduler
    shim = os.environ.get("MUTANT_SHIM")
    split = runpy.run_path(shim)["split"] if shim else Scheduler.__dict__["_mamba_block_aligned_split"]
    if os.environ["MUTANT_ON"] == "class":
        def on_stub(self, *args, **kwargs):
            if isinstance(self, types.SimpleNamespace):
                for name, value in stub_defaults(self).items():
                    if not hasattr(self, name):
                        setattr(self, name, value)
            return split(self, *args, **kwargs)

        monkeypatch.setattr(Scheduler, "_mamba_block_aligned_split", on_stub)
        return
    if not shim:
        return
    init = Scheduler.__init__

    def with_split(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._mamba_block_aligned_split = types.MethodType(split, self)

    monkeypatch.setattr(Scheduler, "__init__", with_split)
"""
# A file whose `split` is one mutant of a set (gdnfuzz loads candidates as file.py:attr).
SHIM = '''import importlib.util

_spec = importlib.util.spec_from_file_location("mutant_set", {path!r})
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
_found = getattr(_module, {attr!r})
split = dict(_found() if callable(_found) else _found)[{name!r}]
'''


def interim_mutants() -> list[tuple[str, Callable[..., int]]]:
    """one_line.py's seven, the one-line mutants of ``OWN``, and the split before vLLM PR #51113."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench" / "mutants"))
    import one_line

    from fuzz.model.policies import resolve_policy

    built = [(name, one_line.build(name, *change)) for name, change in one_line.MUTATIONS.items()]
    built += [(name, one_line.build(name, *change)) for name, change in OWN.items()]
    return [*built, ("pre-51113", resolve_policy("pre-51113").split)]


def mutant_names(spec: str) -> list[str]:
    """The names of the set ``FILE.py:ATTR``."""
    path, attr = spec.rsplit(":", 1)
    module_spec = importlib.util.spec_from_file_location("mutant_set", path)
    assert module_spec is not None and module_spec.loader is not None, path
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    found = getattr(module, attr)
    return [name for name, _ in (found() if callable(found) else found)]


def _outcomes(junit: Path) -> dict[str, str]:
    """Each test's outcome in a pytest JUnit file: passed, failed (an XPASS(strict) too), xfailed, skipped."""
    found = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        children = {child.tag: child for child in case}
        if "failure" in children or "error" in children:
            found[name] = "failed"
        elif "skipped" in children:
            found[name] = "xfailed" if children["skipped"].get("type") == "pytest.xfail" else "skipped"
        else:
            found[name] = "passed"
    return found


def _pytest(scratch: Path, test: str, shim: Path | None, on: str) -> dict[str, str]:
    junit = scratch / "junit.xml"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "MUTANT_SHIM": str(shim or ""), "MUTANT_ON": on}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    str(CORE / test)], cwd=scratch, env=env, capture_output=True, text=True, timeout=1800)
    return _outcomes(junit)


def _fuzz(shim: Path, seconds: int, work: Path) -> tuple[bool, list[str]]:
    """Whether a fuzzing run of the mutant finds one of its own, and the signatures it found."""
    from fuzz.oracle.verdict import outcome

    shutil.rmtree(work, ignore_errors=True)
    (work / "corpus").mkdir(parents=True)
    run = subprocess.run([GDNFUZZ, "run", "--candidate", f"{shim}:split", "--reference", "vllm", "--fail-on", "any",
                          "--max-time", str(seconds), "--corpus", str(work / "corpus"), "--crashes",
                          str(work / "crashes"), "--json"],
                         cwd=work, capture_output=True, text=True, timeout=seconds + 600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if not lines:  # a run that did not start (a bad argument, a mutant that does not load) kills nothing
        raise RuntimeError(f"gdnfuzz run gave no JSON record (exit {run.returncode}): {run.stderr[-2000:]}")
    record = json.loads(lines[-1])
    signatures = [s["signature"] for s in record["signatures"]]
    return any(outcome(s) == "new" for s in signatures), signatures


def scratch_layout(scratch: Path, vllm_test: Path) -> None:
    """vLLM's tests/v1/core layout: the exported suite, vLLM's test with its helper's stand-in, the marker."""
    for package in ("tests", "tests/v1"):
        (scratch / package).mkdir(parents=True, exist_ok=True)
        (scratch / package / "__init__.py").write_text("")
    # the corpus is this checkout's own: its files name bench mutants, which export-test loads only when trusted
    subprocess.run([GDNFUZZ, "export-test", "--suite", str(ROOT / "corpus" / "regressions"), "--out",
                    str(scratch / CORE), "--trust-named-policies"], check=True, capture_output=True, text=True,
                   cwd=ROOT)
    shutil.copy(vllm_test, scratch / CORE / vllm_test.name)
    (scratch / CORE / "utils.py").write_text(CREATE_REQUESTS)
    (scratch / "pytest.ini").write_text("[pytest]\nmarkers =\n    cpu_test: runs on CPU (vLLM's marker)\n")
    (scratch / "conftest.py").write_text(INSTALL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-test", type=Path, required=True, help="vLLM's test file of the split")
    parser.add_argument("--mutants", default=f"{Path(__file__).resolve()}:interim_mutants",
                        help="FILE.py:ATTR, a list of (name, split) or a function returning one")
    parser.add_argument("--fuzz-time", type=int, default=90, help="seconds of gdnfuzz run per mutant (0: none)")
    parser.add_argument("--json", type=Path, help="write the matrix and scores here")
    args = parser.parse_args()
    path, attr = args.mutants.rsplit(":", 1)
    names = mutant_names(args.mutants)
    with tempfile.TemporaryDirectory(prefix="mutation-score-") as tmp:
        scratch = Path(tmp) / "vllm"
        scratch_layout(scratch, args.vllm_test.resolve())
        tests = {"suite": (SUITE_FILE, "instance"), "vllm-test": (args.vllm_test.name, "class")}
        baseline = {check: _pytest(scratch, test, None, on) for check, (test, on) in tests.items()}
        for check, found in baseline.items():
            counts = {o: list(found.values()).count(o) for o in sorted(set(found.values()))}
            print(f"{check} on the installed split: {len(found)} tests, {counts}")
        rows = []
        for name in names:
            shim = Path(tmp) / f"mutant_{len(rows)}.py"
            shim.write_text(SHIM.format(path=str(Path(path).resolve()), attr=attr, name=name))
            row: dict[str, Any] = {"mutant": name}
            for check, (test, on) in tests.items():
                started = time.monotonic()
                found = _pytest(scratch, test, shim, on)
                changed = sorted(t for t in baseline[check] if found.get(t) != baseline[check][t])
                row[check] = {"killed": bool(changed), "changed": changed, "seconds": time.monotonic() - started}
            if args.fuzz_time:
                started = time.monotonic()
                killed, signatures = _fuzz(shim, args.fuzz_time, Path(tmp) / "fuzz")
                row["fuzz"] = {"killed": killed, "signatures": signatures, "seconds": time.monotonic() - started}
            rows.append(row)
            print(f"{name:<34} " + "  ".join(f"{check} {'KILLED' if row[check]['killed'] else 'alive '}"
                                              for check in ("suite", "vllm-test", "fuzz") if check in row),
                  flush=True)
    checks = [c for c in ("suite", "vllm-test", "fuzz") if c in rows[0]]
    print(f"\n{'mutant':<34} " + " ".join(f"{c:>10}" for c in checks))
    for row in rows:
        print(f"{row['mutant']:<34} " + " ".join(f"{'killed' if row[c]['killed'] else '-':>10}" for c in checks))
    scores = {c: sum(row[c]["killed"] for row in rows) for c in checks}
    print(f"{'killed of ' + str(len(rows)):<34} " + " ".join(f"{scores[c]:>10}" for c in checks))
    either = sum(any(row[c]["killed"] for c in checks if c != "vllm-test") for row in rows)
    print(f"suite or fuzz: {either} of {len(rows)}; vLLM's test alone: {scores['vllm-test']}")
    if args.json:
        args.json.write_text(json.dumps({"mutants": args.mutants, "baseline": baseline, "rows": rows,
                                         "scores": scores}, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
