"""Coverage of vLLM's caching code by a corpus: each scenario replayed once on the sim tier under coverage.py.

Figures are per function of :data:`WATCHED`. Invariant: the executor (which imports torch) is created before
coverage starts, as coverage.py's tracer running while ``torch`` is imported crashes the interpreter."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.errors import ConfigRejected, InputError
from fuzz.model.policies import Policy
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.search.mutate import decode
from fuzz.store.corpus_merge import MAX_INPUT_BYTES
from fuzz.tiers import executor_for

# (module file under vllm/, the qualified-name prefix coverage.py reports) for each watched function group
WATCHED = (
    ("v1/core/sched/scheduler.py", "Scheduler._mamba_block_aligned_split"),
    ("v1/core/single_type_kv_cache_manager.py", "MambaManager."),
)


class CoverageUnavailable(InputError):
    """coverage.py is not installed (it is in the ``coverage`` and ``test`` extras)."""


@dataclass(frozen=True)
class FunctionCoverage:
    name: str
    covered_lines: int
    num_lines: int
    covered_branches: int
    num_branches: int
    missing_lines: tuple[int, ...]

    @property
    def complete(self) -> bool:
        return self.covered_lines == self.num_lines


@dataclass
class CoverageReport:
    scenarios: int = 0
    rejected: int = 0  # valid scenarios whose engine config vLLM rejects (nothing to cover)
    functions: list[FunctionCoverage] = field(default_factory=list)


def corpus_files(paths: Iterable[str | Path]) -> list[Path]:
    """Every regular file under ``paths`` (directories walked, hidden files skipped), sorted."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")]
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or directory")
    return sorted(files)


def read_input(path: Path) -> Scenario:
    """The scenario a file stands for: a ``.json`` file is a strictly validated scenario (else ScenarioError), any
    other a libFuzzer entry decoded from its first ``-max_len`` bytes (``fuzz.search.mutate.decode``)."""
    if path.suffix == ".json":
        return load_scenario(path)[0]
    with open(path, "rb") as f:  # libFuzzer loads a corpus entry up to its -max_len, and so does this
        return decode(f.read(MAX_INPUT_BYTES))


def _start_coverage(vllm_dir: Path) -> Any:
    try:
        import coverage
    except ImportError:
        raise CoverageUnavailable("coverage.py is not installed: pip install -e '.[coverage]'") from None
    cov = coverage.Coverage(branch=True, data_file=None, include=[str(vllm_dir / "v1" / "core" / "*")])
    cov.start()
    return cov


def measure(files: list[Path], policy: Policy, html_dir: Path | None = None) -> CoverageReport:
    """Replay ``files`` on the sim tier under coverage; figures for :data:`WATCHED`, HTML if asked."""
    scenarios = [read_input(f) for f in files]  # every input checked before the long run starts
    executor = executor_for("sim")  # imports vLLM and torch: coverage must start after this
    import vllm

    vllm_dir = Path(vllm.__file__).parent
    cov = _start_coverage(vllm_dir)
    report = CoverageReport()
    try:
        for scenario in scenarios:
            try:
                executor.run(scenario, policy)
                report.scenarios += 1
            except ConfigRejected:
                report.rejected += 1
    finally:
        cov.stop()
    from coverage.jsonreport import JsonReporter

    buffer = io.StringIO()
    JsonReporter(cov).report(None, buffer)
    # coverage.py names a file relative to the working directory when it lies below it
    data = {Path(name).resolve(): entry for name, entry in json.loads(buffer.getvalue())["files"].items()}
    for relative, prefix in WATCHED:
        entry = data.get((vllm_dir / relative).resolve(), {"functions": {}})
        for name, fn in sorted(entry["functions"].items(), key=lambda kv: kv[1]["start_line"]):
            if name == prefix or (prefix.endswith(".") and name.startswith(prefix)):
                s = fn["summary"]
                report.functions.append(FunctionCoverage(
                    name, s["covered_lines"], s["num_statements"], s["covered_branches"], s["num_branches"],
                    tuple(fn["missing_lines"])))
    if html_dir is not None:
        cov.html_report(directory=str(html_dir), title="gdnfuzz corpus coverage of vllm/v1/core")
    return report


def format_report(report: CoverageReport) -> str:
    """One row per watched function, then the totals over them."""
    width = max((len(f.name) for f in report.functions), default=8)
    rows = [f"{report.scenarios} scenarios replayed on the sim tier ({report.rejected} rejected by vLLM)",
            f"{'function':<{width}}  {'lines':>9}  {'branches':>9}  missing lines"]
    for f in report.functions:
        missing = ",".join(map(str, f.missing_lines)) or "-"
        rows.append(f"{f.name:<{width}}  {f.covered_lines:>4}/{f.num_lines:<4}  "
                    f"{f.covered_branches:>4}/{f.num_branches:<4}  {missing}")
    return "\n".join(rows)
