"""The crash bundle ``crashes/<signature>/`` (``scenario.json`` with ``expect``, also in ``corpus/regressions/``;
``original.json``, ``verdict.json``, ``report.md``, maybe ``test_regression.py``): stored here, never rendered.
Invariants: one directory per signature (a repeat bumps ``hits``); files written atomically, ``verdict.json`` last, in
a staging directory renamed into place whole; later changes go through :func:`update_verdict`; :func:`load_bundle`
takes only a complete, well-typed bundle named by its signature, else :class:`BundleError` naming file and field."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,  # pydantic needs this TypedDict before Python 3.12
)

from pydantic import Field, Strict
from typing_extensions import TypedDict

from fuzz.errors import FieldError
from fuzz.model import json_input, schema
from fuzz.model.expectations import as_found
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import Scenario, ScenarioError, load_scenario, pretty_json, scenario_summary
from fuzz.model.schema import Says
from fuzz.oracle.finding import Finding, environment
from fuzz.store.atomic import atomic_write, temporary_name

BUNDLE_FILES = ("scenario.json", "original.json", "verdict.json", "report.md")
TEST_FILE = "test_regression.py"  # optional: older bundles have none
HARNESS_FILE = "mamba_align_replay.py"  # in the crash store, one for all its bundles' tests (fuzz/report/)
CASE_FILE = "case.json"  # the test's case, beside it (older bundles' tests hold theirs)
CONFIRMED_STATES = ("confirmed", "not confirmed", "inconclusive", None)
ENVIRONMENT_KEYS = ("vllm", "torch", "device")
SIGNATURE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
VERIFY_STATES = ("reproduces", "fixed", "flaky", "unverifiable")
ISSUE_ACTIONS = ("closed", "reopened", "left closed", "none", "no issue")
BISECT_MODES = ("split", "branch")


class BundleError(FieldError):
    """A crash bundle that cannot be used, with the file and field at fault."""

    def __init__(self, file: str | Path, field_path: str, message: str):
        super().__init__(field_path, message, file)


@dataclass(frozen=True)
class CrashBundle:
    """One validated ``crashes/<signature>/`` directory."""

    path: Path
    verdict: dict[str, Any]
    scenario: Scenario
    annotations: dict[str, Any]
    original: Scenario
    report: str
    test: str | None = None  # test_regression.py, where the bundle has one
    case: dict[str, Any] | None = None  # case.json, the test's case, where it is beside the test

    @property
    def signature(self) -> str:
        return self.verdict["signature"]

    @property
    def symptom(self) -> str:
        """The name after what it shows (the signature where no root cause names it), as ``verify.trial`` calls it."""
        return self.verdict.get("symptom") or self.signature

    @property
    def environment(self) -> dict[str, str]:
        return self.verdict["environment"]


def _expected(name: str, missing: bool = True) -> Says:
    """``expected str, got 3``: a field of the wrong type (``missing``: or missing, ``got None``)."""
    return Says(lambda v: f"expected {name}, got {v!r}", missing)


def _one_of(states: tuple[str | None, ...]) -> Says:
    return Says(lambda v: f"expected one of {states}, got {v!r}", missing=True)


Str = Annotated[str, Strict(), _expected("str")]
Int = Annotated[int, Strict(), _expected("int")]
Given = Annotated[str, Strict(), _expected("str", missing=False)]  # a verdict's own fields: ``missing``
StrOrNull = Annotated[Annotated[str, Strict()] | None, _expected("str or null")]
Signature = Annotated[str, Strict(), Field(pattern=SIGNATURE_PATTERN), Says(
    lambda v: f"{v!r} is not a file-name-safe signature" if isinstance(v, str) else f"expected str, got {v!r}")]
EnvironmentValue = Annotated[str, Strict(), Says(lambda v: "expected a string", missing=True)]
Confirmed = Annotated[Literal[CONFIRMED_STATES], _one_of(CONFIRMED_STATES)]
Hits = Annotated[int, Strict(), Field(ge=0), Says(lambda v: f"expected a count, got {v!r}")]
Tries = Annotated[int, Strict(), Field(ge=1), Says(
    lambda v: f"expected at least 1, got {v}" if type(v) is int else f"expected int, got {v!r}", missing=True)]


class Environment(TypedDict):
    """Where the finding was made; more keys allowed (``ENVIRONMENT_KEYS`` come first in reports)."""

    vllm: EnvironmentValue
    torch: EnvironmentValue
    device: EnvironmentValue


class Verdict(TypedDict):
    """The ``verdict.json`` fields every reader relies on, in check order; other keys kept (later life: Lifecycle)."""

    signature: Signature
    kind: Given
    summary: Given
    candidate: Given
    reference: Given
    first_request: Annotated[Annotated[str, Strict()] | None, _expected("str", missing=False)]
    first_step: Annotated[Annotated[int, Strict()] | None, _expected("int", missing=False)]
    tier: Given
    environment: Annotated[Environment, _expected("dict", missing=False)]
    confirmed: Confirmed
    hits: NotRequired[Hits]


class Counts(TypedDict):
    """``tries`` and ``hits`` of a verification (``0 <= hits <= tries``: checked beside the schema)."""

    tries: Tries
    hits: Int


class Issue(TypedDict):
    action: Annotated[Literal[ISSUE_ACTIONS], _one_of(ISSUE_ACTIONS)]


class Verification(TypedDict):
    """A ``verifications`` record: a candidate key present was checked (a rerun changes nothing); more keys allowed."""

    status: Annotated[Literal[VERIFY_STATES], _one_of(VERIFY_STATES)]
    tries: Tries
    hits: Int
    candidate: Str
    issue: NotRequired[Annotated[Issue | None, _expected("dict or null")]]


class FixedIn(TypedDict):
    candidate: Str
    revision: NotRequired[StrOrNull]
    subject: NotRequired[StrOrNull]
    last_bad: NotRequired[StrOrNull]


class RegressionRange(TypedDict):
    first_bad: Str
    subject: Str
    last_good: Str
    checkout: Str
    mode: Annotated[Literal[BISECT_MODES], _one_of(BISECT_MODES)]
    skipped: Annotated[list[Any], Strict(), _expected("list")]
    loaded: Int
    revisions: Int


Record = Annotated[Verification, Says(lambda v: f"expected an object, got {v!r}")]


class Lifecycle(TypedDict, total=False):
    """A finding's later life, each field checked where present (``fuzz.report.lifecycle`` rewrites report.md first)."""

    reproducibility: Annotated[Counts | None, _expected("dict")]
    verifications: Annotated[dict[str, Record] | None, _expected("dict or null")]
    fixed_in: Annotated[FixedIn | None, _expected("dict or null")]
    regression_range: Annotated[RegressionRange | None, _expected("dict or null")]


def load_verdict(path: str | Path) -> dict[str, Any]:
    """Read and validate one ``verdict.json``; extra fields are kept as they are."""
    path = Path(path)
    data = json_input.read_json(path, failing(path))
    if not isinstance(data, dict):
        raise BundleError(path, "<top>", f"expected a JSON object, got {type(data).__name__}")
    schema.validate(Verdict, data, failing(path))
    if "\n" in data["summary"] or not data["summary"].strip():
        raise BundleError(path, "summary", "expected one non-empty line")
    check_lifecycle(path, data)
    return data


def check_lifecycle(path: Path, data: dict[str, Any]) -> None:
    """The optional fields of a finding's later life (module docstring), each checked where present."""
    schema.validate(Lifecycle, data, failing(path))
    records = {f"verifications.{key}.": record for key, record in (data.get("verifications") or {}).items()}
    for where, counts in {"reproducibility.": data.get("reproducibility"), **records}.items():
        if counts is not None and not 0 <= counts["hits"] <= counts["tries"]:
            raise BundleError(path, f"{where}hits", f"expected 0..{counts['tries']} (the tries), got {counts['hits']}")


def failing(file: Path) -> json_input.Fail:
    return lambda field, message: BundleError(file, field, message)


def load_bundle(path: str | Path) -> CrashBundle:
    """Load and validate the crash bundle in directory ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(path, "<dir>", "not a crash bundle directory")
    for name in BUNDLE_FILES:
        if not (path / name).is_file():
            raise BundleError(path / name, "<file>", "no such file")
    verdict = load_verdict(path / "verdict.json")
    if verdict["signature"] != path.resolve().name:
        raise BundleError(
            path / "verdict.json", "signature", f"{verdict['signature']!r} is not the directory name {path.name!r}"
        )
    try:
        scenario, annotations = load_scenario(path / "scenario.json")
        original, _ = load_scenario(path / "original.json")
    except ScenarioError as exc:
        raise BundleError(exc.file or path, exc.field_path, exc.message) from None
    if "expect" not in annotations:
        raise BundleError(path / "scenario.json", "expect", "missing (a minimized scenario records its expectation)")
    report = json_input.read_text(path / "report.md", failing(path / "report.md"))
    test = json_input.read_text(path / TEST_FILE, failing(path / TEST_FILE)) if (path / TEST_FILE).exists() else None
    case = json_input.read_json(path / CASE_FILE, failing(path / CASE_FILE)) if (path / CASE_FILE).exists() else None
    if case is not None and type(case) is not dict:
        raise BundleError(path / CASE_FILE, "<root>", "not a JSON object (a case)")
    return CrashBundle(path, verdict, scenario, annotations, original, report, test, case)



# ---------------------------------------------------------------- writing


def save_finding(f: Finding, crashes: Path, regressions: Path | None, documents: Callable[[Path], dict[str, str]],
                 replay: bool = False) -> Path:
    """Write the bundle for ``f.signature``, or count one more occurrence; returns the bundle directory. ``documents``:
    name -> text, for a new bundle only; ``replay``: a committed corpus input, counted in ``replays``, not ``hits``."""
    bundle = crashes / f.signature
    verdict_file = bundle / "verdict.json"
    if verdict_file.exists():
        count_occurrence(bundle, replay)
        return bundle
    head = f.head
    expect = {f.candidate: f.verdict.status.value}
    if f.reference == "vllm" and head.side == "candidate":
        expect["vllm"] = VerdictStatus.CLEAN.value
    annotations = {"expect": as_found(expect, f.minimized.engine), "origin": f"gdnfuzz finding {f.signature}"}
    regression = None if regressions is None else regressions / f"{f.signature}.json"
    with _new_bundle(bundle, regression) as staging:
        _write_bundle(f, bundle, staging, regression, documents, annotations, replay)
    return bundle


def _write_bundle(f: Finding, bundle: Path, staging: Path, regression: Path | None,
                  documents: Callable[[Path], dict[str, str]], annotations: dict[str, Any], replay: bool) -> None:
    """The files of ``bundle`` (rendered for its final place) into ``staging``, ``verdict.json`` last."""
    head = f.head
    atomic_write(staging / "scenario.json", pretty_json(f.minimized, annotations))
    atomic_write(staging / "original.json", pretty_json(f.original))
    for name, text in documents(bundle).items():
        atomic_write(staging / name, text)
    if regression is not None:
        atomic_write(regression, pretty_json(f.minimized, annotations))
    verdict = {
        "signature": f.signature,
        "class": f.finding_class.name,
        "symptom": f.finding_class.symptom(f.verdict, f.minimized, f.candidate_run),
        "kind": head.kind,
        "summary": head.summary,
        "candidate": f.candidate,
        "reference": f.reference,
        "fail_on": str(f.fail_on),
        "first_request": head.request_id,
        "first_step": head.step,
        "tier": f.tier,
        "confirmed": None,
        "environment": environment(),
        "hits": 0 if replay else 1,
        "replays": 1 if replay else 0,
        "verdict": f.verdict.to_dict(),
        "stages": f.stages,
        "sizes": {"original": scenario_summary(f.original), "minimized": scenario_summary(f.minimized),
                  "steps": len(f.candidate_run.steps)},
    }
    write_verdict(staging, verdict)


@contextlib.contextmanager
def _new_bundle(bundle: Path, regression: Path | None) -> Iterator[Path]:
    """Yield a staging directory for a new bundle, then rename it into place whole (replacing a verdict-less leftover);
    on failure remove it and a regression file the writes created, and re-raise."""
    parent = bundle.parent / temporary_name("staging")
    new_regression = regression is not None and not regression.exists()
    try:
        staging = parent / bundle.name
        staging.mkdir(parents=True)
        yield staging
        if bundle.exists() and not (bundle / "verdict.json").exists():
            shutil.rmtree(bundle)
        os.rename(staging, bundle)
        _fsync_dir(bundle.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            if new_regression and regression is not None:
                regression.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_verdict(bundle: Path, data: dict[str, Any]) -> None:
    atomic_write(bundle / "verdict.json", json.dumps(data, indent=1, sort_keys=True) + "\n")


def update_verdict(bundle: Path, **changes: Any) -> dict[str, Any]:
    """Set ``changes`` in the bundle's ``verdict.json`` (validated first), in one atomic write."""
    data = load_verdict(Path(bundle) / "verdict.json")
    data.update(changes)
    write_verdict(Path(bundle), data)
    return data


def count_occurrence(bundle: Path, replay: bool = False) -> None:
    """One more occurrence: a new discovery (``hits``) or a replay of a committed corpus input (``replays``)."""
    add_occurrences(bundle, 1, replay)


def add_occurrences(bundle: Path, n: int, replay: bool = False) -> None:
    """``n`` more occurrences of the bundle's signature, in one write (see :func:`count_occurrence`)."""
    data = load_verdict(Path(bundle) / "verdict.json")
    key = "replays" if replay else "hits"
    update_verdict(bundle, **{key: int(data.get(key, 0 if replay else 1)) + n})


def sync_counts(bundle: Path, raw_bundles: list[Path]) -> None:
    """Set ``hits`` and ``replays`` to the sums over the fuzzers' raw bundles of the signature (each counts its own)."""
    if not raw_bundles:
        return
    raws = [load_verdict(p / "verdict.json") for p in raw_bundles]
    update_verdict(bundle, hits=sum(int(r.get("hits", 1)) for r in raws),
                   replays=sum(int(r.get("replays", 0)) for r in raws))


def store_as_found(raw_bundle: Path, crashes: Path, regressions: Path | None) -> Path:
    """Store a raw bundle as the signature's bundle, unminimized, ``verdict.json`` last; returns its directory."""
    sig = load_verdict(raw_bundle / "verdict.json")["signature"]
    bundle = crashes / sig
    regression = None if regressions is None else regressions / f"{sig}.json"
    with _new_bundle(bundle, regression) as staging:
        for name in (*BUNDLE_FILES, TEST_FILE, CASE_FILE):
            if name != "verdict.json" and (raw_bundle / name).exists():
                atomic_write(staging / name, (raw_bundle / name).read_bytes())
        if regression is not None:
            atomic_write(regression, (raw_bundle / "scenario.json").read_bytes())
        atomic_write(staging / "verdict.json", (raw_bundle / "verdict.json").read_bytes())
    if (raw_bundle.parent / HARNESS_FILE).is_file():  # the harness the raw bundle's test imports
        store_harness(crashes, (raw_bundle.parent / HARNESS_FILE).read_text())
    return bundle


def store_harness(crashes: Path, text: str) -> None:
    """``crashes``' harness is ``text``: written (atomically) only where it differs. A link to the harness
    itself (this repository's ``crashes/``) is left as it is."""
    path = crashes / HARNESS_FILE
    if not (path.is_file() and path.read_text() == text):
        atomic_write(path, text)
