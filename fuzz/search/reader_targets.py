"""atheris targets over every reader of user files (``python -m fuzz.search.reader_targets FAMILY [--seeds DIR]
[libFuzzer flags] [CORPUS_DIR ...]``). Invariant checked: the reader returns or raises
:class:`~fuzz.errors.InputError`; any other exception, a hang or a crash is a libFuzzer finding."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz.errors import InputError
from fuzz.store.atomic import atomic_write

FAMILIES = ("scenario", "bundle", "stats", "schedule")
SCHEDULE_READER = "workers.kernels.schedule:read_schedule"
SEED_SCENARIO: dict[str, Any] = {
    "gdnfuzz_scenario": 1, "seed": 3, "expect": {"pre-51113": "diverged", "vllm": "clean"}, "note": "seed",
    "engine": {"mamba_block_size": 64, "block_size": 16, "max_num_batched_tokens": 96, "step_budgets": [40, 96],
               "spec_decode": "mtp", "num_speculative_tokens": 2, "num_kv_blocks": 64},
    "segments": {"system": 64},
    "requests": [{"id": "a", "prompt": ["system", 20], "max_tokens": 3, "accept": [1, 0]},
                 {"id": "b", "prompt": [8], "continues": "a", "arrival_step": 2, "abort_step": 9,
                  "external_tokens": 16}],
}
SEED_VERDICT: dict[str, Any] = {
    "signature": "poisoned-slot-seed", "class": "correctness", "kind": "poisoned-slot",
    "summary": "slot hashed as state@64 holds state@40", "candidate": "pre-51113", "reference": "vllm",
    "fail_on": "correctness", "first_request": "b", "first_step": 4, "tier": "sim", "confirmed": None,
    "environment": {"vllm": "0.32.0", "torch": "2.9", "device": "cpu"}, "hits": 1,
}
SEED_STATS = [
    {"time": 1.7e9, "actor": "fuzzer-0", "execs": 120, "exec_per_s": 4.5, "coverage": 310, "corpus_size": 12},
    {"time": 1.7e9 + 30, "actor": "verifier-0", "verifier_queue": 2, "findings": 1},
    {"time": 1.7e9 + 60, "actor": "fuzzer-0", "execs": 400, "exec_per_s": 5.0, "coverage": 330, "corpus_size": 14},
]
SEED_SCHEDULE_RESULT: dict[str, Any] = {
    "tier": "sim", "policy": "vllm", "scenario_id": "0" * 16, "status": "ok",
    "requests": {"a": {"id": "a", "prompt_tokens": 84, "hit_tokens": 0, "output_tokens": [5, 6, 7]},
                 "b": {"id": "b", "prompt_tokens": 95, "hit_tokens": 64, "resume_state_ok": True,
                       "output_tokens": [9], "top_logprobs": [{"9": -0.5}]}},
    "steps": [{"step": 0, "budget": 40, "chunks": [{"request_id": "a", "start": 0, "num_tokens": 40,
                                                    "read_block": None, "write_blocks": [3]}],
               "copies": [[1, 2]], "seconds": None}],
    "poisoned": [], "faults": [{"kind": "contract", "detail": "x", "step": 0, "request_id": "a"}],
    "hashed_mamba_blocks": 1, "notes": ["seed"],
}


def seed_inputs(family: str) -> list[bytes]:
    """Valid inputs of ``family``, to start a corpus from."""
    scenario = json.dumps(SEED_SCENARIO, indent=1).encode()
    if family == "scenario":
        return [scenario, json.dumps({k: v for k, v in SEED_SCENARIO.items() if k != "expect"}).encode()]
    if family == "bundle":
        return [bytes([i]) + body for i, body in enumerate(_bundle_files().values())]
    if family == "stats":
        return ["".join(json.dumps(r) + "\n" for r in SEED_STATS).encode()]
    schedule = {"gdnfuzz_kernel_schedule": 1,
                "entries": [{"scenario": _plain_scenario(), "result": SEED_SCHEDULE_RESULT, "source": "seed"}]}
    return [json.dumps(schedule).encode()]


def dictionary() -> str:
    """A libFuzzer ``-dict`` file: every key and string of the seeds (quoted), and JSON's awkward tokens."""
    tokens = {"null", "true", "false", "-1", "1e999", "NaN", "-Infinity", "{}", "[]", '"\\ud800"', "9" * 25}
    stack: list[Any] = [SEED_SCENARIO, SEED_VERDICT, SEED_STATS, SEED_SCHEDULE_RESULT]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            tokens |= {json.dumps(key) for key in node}
            stack += node.values()
        elif isinstance(node, list):
            stack += node
        elif isinstance(node, str):
            tokens.add(json.dumps(node))
    return "".join(f"{json.dumps(token)}\n" for token in sorted(tokens))


def _plain_scenario() -> dict[str, Any]:
    """The seed scenario without its annotations (as ``original.json`` and schedules hold it)."""
    return {k: v for k, v in SEED_SCENARIO.items() if k not in ("expect", "note")}


def _bundle_files() -> dict[str, bytes]:
    scenario = json.dumps(SEED_SCENARIO, indent=1).encode()
    original = json.dumps(_plain_scenario()).encode()
    return {"verdict.json": json.dumps(SEED_VERDICT).encode(), "scenario.json": scenario,
            "original.json": original, "report.md": b"# poisoned-slot-seed\n"}


class ReaderTarget:
    """One family's target: writes the input where the reader reads it, and reads it."""

    def __init__(self, family: str, workdir: Path):
        if family not in FAMILIES:
            raise InputError(f"unknown reader family {family!r}: use one of {', '.join(FAMILIES)}")
        self.family = family
        self.file = workdir / "input"
        self.bundle = workdir / SEED_VERDICT["signature"]
        self.read: Callable[[bytes], Any] = getattr(self, f"_read_{family}")
        if family == "bundle":
            self.bundle.mkdir(exist_ok=True)
        if family == "schedule":
            from fuzz.tiers import load  # noqa: PLC0415 - the schedule reader is a worker's, named by path

            self.read_schedule = load(SCHEDULE_READER)

    def __call__(self, data: bytes) -> None:
        with contextlib.suppress(InputError):  # the one allowed refusal
            self.read(data)

    def _write(self, path: Path, data: bytes) -> Path:
        return atomic_write(path, data)

    def _read_scenario(self, data: bytes) -> Any:
        from fuzz.model.scenario import load_scenario  # noqa: PLC0415 - imported under instrumentation

        return load_scenario(self._write(self.file, data))

    def _read_bundle(self, data: bytes) -> Any:
        from fuzz.store.bundle import load_bundle  # noqa: PLC0415 - imported under instrumentation

        files = _bundle_files()
        names = list(files)
        if data:
            files[names[data[0] % len(names)]] = data[1:]
        for name, body in files.items():
            self._write(self.bundle / name, body)
        return load_bundle(self.bundle)

    def _read_stats(self, data: bytes) -> Any:
        from fuzz.report.dashboard import render_dashboard  # noqa: PLC0415 - imported under instrumentation
        from fuzz.report.status_table import format_table  # noqa: PLC0415
        from fuzz.store.stats import latest_by_actor, read_stats  # noqa: PLC0415

        rows = read_stats(self._write(self.file, data))
        now = max((r.time for r in rows), default=0.0) + 5
        if rows:
            format_table(latest_by_actor(rows), now)
        return render_dashboard(rows, [], self.file.parent, now, None)

    def _read_schedule(self, data: bytes) -> Any:
        return self.read_schedule(self._write(self.file, data))


def main(argv: list[str]) -> None:
    import atheris  # noqa: PLC0415 - only the fuzzing process needs it

    if len(argv) < 2 or argv[1] not in FAMILIES:
        raise SystemExit(f"usage: python -m fuzz.search.reader_targets {{{','.join(FAMILIES)}}} "
                         "[--seeds DIR] [libFuzzer flags] [CORPUS_DIR ...]")
    family, rest = argv[1], argv[2:]
    if rest[:1] == ["--seeds"]:
        seeds = Path(rest[1])
        seeds.mkdir(parents=True, exist_ok=True)
        for i, body in enumerate(seed_inputs(family)):
            atomic_write(seeds / f"seed-{i}", body)
        atomic_write(seeds.with_suffix(".dict"), dictionary())
        rest = rest[2:]
    with atheris.instrument_imports(include=["fuzz", "workers.kernels.schedule"]):
        scratch = "/dev/shm" if os.path.isdir("/dev/shm") else None  # an fsync per input costs nothing there
        target = ReaderTarget(family, Path(tempfile.mkdtemp(prefix=f"gdnfuzz-reader-{family}-", dir=scratch)))
        target(seed_inputs(family)[0])  # imports the reader (under instrumentation) before fuzzing starts
    atheris.Setup([argv[0], *rest], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
