"""``gdnfuzz export-test``: findings as pytest files needing only vLLM and pytest, in vLLM's test style.

Around one harness (``mamba_align_replay.py``): a suite (the harness and a test module over plain-data cases,
``xfail(strict=True)`` where vLLM's split fails) or one self-contained file. Invariant: a case is written whole, so a
test replays exactly the judged run; what it expects comes from ``fuzz.report.expectation``."""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz.model.cost import run_cost
from fuzz.model.knobs import engine_args, scheduler_settings
from fuzz.model.policies import BUILTINS, PolicyError, resolve_policy
from fuzz.oracle.differential import replay
from fuzz.oracle.efficiency import comparable, costs
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import finding_signature
from fuzz.report.expectation import INSTALLED, Expectation, expectation
from fuzz.report.harness_source import HARNESS, harness_literal
from fuzz.report.literal import WIDTH, layout
from fuzz.report.root_cause import cause_words
from fuzz.report.vllm_terms import model_words, serve_command, vllm_locations, vllm_release
from fuzz.tiers import SCHEDULER_TIER, executor_for

HARNESS_MODULE = HARNESS.stem
SUITE_FILE = "test_mamba_align_fuzz_regressions.py"
SUITE_TEST = "test_mamba_align_replay"
SPDX = ("# SPDX-License-Identifier: Apache-2.0\n"
        "# SPDX-FileCopyrightText: Copyright contributors to the vLLM project\n")


@dataclass(frozen=True)
class ExportedCase:
    """One finding as a case: id, data, expectation, and the upstream report of a bug of vLLM's own."""

    name: str
    finding: Finding
    data: dict[str, Any]
    expectation: Expectation
    upstream: str | None = None


def _reference_costs(f: Finding) -> dict[str, Any] | None:
    """What vLLM's reference split paid, over the requests both runs compare (a cost finding only)."""
    if not f.finding_class.exact_on_sim or f.reference_run is None:
        return None
    candidate, reference = run_cost(f.minimized, f.candidate_run), run_cost(f.minimized, f.reference_run)
    requests = [r for _, r in comparable(candidate, reference)]
    paid = costs(reference, requests)
    return {"prompt_tokens": {r.request_id: r.prompt_tokens for r in requests},
            "recomputed tokens": paid.recomputed_tokens, "forward passes": paid.forward_passes,
            "steps to first token": paid.steps_to_first_token}


def case_data(f: Finding, configuration: dict[str, Any]) -> dict[str, Any]:
    """Everything the harness replays for ``f`` as plain data; request fields at the harness's defaults left out."""
    s, knobs = f.minimized, f.minimized.engine
    defaults = harness_literal("REQUEST_DEFAULTS")
    requests = [{k: v for k, v in r.items() if k not in defaults or v != defaults[k]}
                for r in s.to_dict()["requests"]]
    return {
        "engine_args": engine_args(knobs),
        "scheduler": scheduler_settings(knobs),
        "attention_block_size": knobs.block_size,
        "prefill_checkpoint_alignment": knobs.prefill_checkpoint_alignment,
        "num_kv_blocks": configuration["num_kv_blocks"],
        "step_budgets": list(knobs.step_budgets),
        "max_steps": configuration["max_steps"],
        "seed": s.seed,
        "segments": dict(s.segments),
        "requests": requests,
        "reference_costs": _reference_costs(f),
    }


def harness_text(configuration: dict[str, Any]) -> str:
    """The harness module, whose model (``config.json``, Mamba state shapes, context) must be the sim tier's
    ``configuration``: one file, imported in place by bundles and ``docs/upstream``, inlined by exports."""
    held = {"model_config": harness_literal("MODEL_CONFIG"), "max_model_len": harness_literal("MAX_MODEL_LEN"),
            "state_shapes": [list(s) for s in harness_literal("STATE_SHAPES")]}
    if any(configuration[key] != value for key, value in held.items()):
        raise AssertionError(f"{HARNESS}: its model section is not the sim tier's model; write the tier's in")
    return HARNESS.read_text()


def _paragraphs(*blocks: str | list[str]) -> str:
    """Docstring text: each block a paragraph wrapped to vLLM's width, or (a list) lines kept as they are."""
    out = []
    for block in blocks:
        out.append("\n".join(block) if isinstance(block, list)
                   else textwrap.fill(block, WIDTH - 4, break_on_hyphens=False, break_long_words=False))
    return "\n\n".join(out)


def _serve_lines(f: Finding) -> list[str]:
    """The ``vllm serve`` command, indented, a flag and its value a line (shell continuations)."""
    words = shlex.split(serve_command(f.minimized.engine))
    pieces = [shlex.join(words[:3])]
    for word in words[3:]:
        if word.startswith("--"):
            pieces.append(shlex.quote(word))
        else:
            pieces[-1] += " " + shlex.quote(word)
    return ["    " + pieces[0] + " \\", *[f"        {p} \\" for p in pieces[1:-1]], f"        {pieces[-1]}"]


def docstring(f: Finding, expect: Expectation) -> str:
    """The single-file test's docstring: the finding, check and expectation, ``vllm serve`` line, root cause, code."""
    found = (f"Found on the split `{f.candidate}` itself." if f.candidate == f.reference
             else f"Found with the split `{f.candidate}` against `{f.reference}`.")
    cause = cause_words(f)
    code = "Code involved: " + "; ".join(f"{name} ({where})" for name, where in vllm_locations().items()) + "."
    return _paragraphs(
        f"Regression test for gdnfuzz finding {f.signature}: {f.head.summary}.",
        f"{found} {expect.what()} {expect.result()}",
        "Configuration, as vLLM is started for it:",
        _serve_lines(f),
        [line for w in model_words(f.minimized.engine)
         for line in textwrap.wrap(w, WIDTH - 4, initial_indent="- ", subsequent_indent="  ",
                                   break_on_hyphens=False)],
        *([f"Root cause: {cause}"] if cause else []),
        code,
        "Exported by `gdnfuzz export-test`; it imports nothing of gdnfuzz.",
    )


def _test_function(name: str, case: str) -> str:
    return f"def {name}(tmp_path: Path) -> None:\n    assert_replay_holds({case}, replay({case}, tmp_path))\n"


def candidate_loader(spec: str) -> tuple[str, str]:
    """Source giving candidate ``spec``'s split with vLLM and the stdlib only, and the expression that is it
    (a built-in's source, ``file.py:attr``, ``module:attr``; loaded before vLLM's split is swapped); checkouts raise."""
    if spec in BUILTINS:
        source = textwrap.dedent(inspect.getsource(BUILTINS[spec][0]))
        return re.sub(r"^def \w+\(", "def candidate_split(", source, count=1), "candidate_split"
    target, _, attr = spec.rpartition(":")
    if not target or not attr.isidentifier() or Path(spec).is_dir() or spec.startswith("branch:"):
        raise PolicyError(f"{spec}: a split the exported test can load needs file.py:attr, module:attr or a "
                          "built-in (for a checkout, install it and export with --checks installed)")
    if target.endswith(".py"):
        load = (f'    spec = importlib.util.spec_from_file_location(\n        "candidate_split", '
                f'{json.dumps(str(Path(target).resolve()))}\n    )\n'
                "    module = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(module)\n"
                f"    return module.{attr}\n")
    else:
        load = f"    return importlib.import_module({json.dumps(target)}).{attr}\n"
    return (f'def load_candidate_split() -> Any:\n    """The split `{spec}`."""\n{load}',
            "load_candidate_split()")


def _installed_split(spec: str) -> str:
    """The fixture setting the candidate's split on each Scheduler instance the test builds (as the sim does)."""
    source, split = candidate_loader(spec)
    return (f"{source}\n\n@pytest.fixture(autouse=True)\n"
            "def split_under_test(monkeypatch: pytest.MonkeyPatch) -> None:\n"
            '    """The split under test replaces vLLM\'s own for this file\'s test."""\n'
            f"    split, init = {split}, Scheduler.__init__\n\n"
            "    def with_split(self: Scheduler, *args: Any, **kwargs: Any) -> None:\n"
            "        init(self, *args, **kwargs)\n"
            "        self._mamba_block_aligned_split = MethodType(split, self)\n\n"
            '    monkeypatch.setattr(Scheduler, "__init__", with_split)\n\n\n')


def render_test(case: ExportedCase, configuration: dict[str, Any]) -> str:
    """One finding as one pytest file: the harness, the case, its test (and a fixture installing a candidate split)."""
    loader = "" if case.expectation.checks_installed else _installed_split(case.expectation.split)
    return single_file(docstring(case.finding, case.expectation), case.data, test_name(case.finding.signature),
                       harness_text(configuration), loader)


def single_file(doc: str, data: dict[str, Any], name: str, harness: str, loader: str = "") -> str:
    """The harness with ``doc`` above its own docstring, ``loader`` (source), the case ``data`` and its test."""
    harness = exported_harness(harness)
    body = harness[harness.index('"""', harness.index('"""') + 3) + 4:]  # the harness's docstring is replaced
    own = ast.get_docstring(ast.parse(harness)) or ""
    if loader:
        extra = "import importlib\nimport importlib.util\n" if "importlib" in loader else ""
        body = body.replace("import hashlib\n", f"import hashlib\n{extra}", 1)
        body = body.replace("from pathlib import Path\n", "from pathlib import Path\nfrom types import MethodType\n", 1)
    body = body.replace("\nCase = dict[str, Any]\n", "\npytestmark = pytest.mark.cpu_test\n\nCase = dict[str, Any]\n", 1)
    text = '"""' + doc + "\n\n" + own + '\n"""\n' + body
    cases = "\n".join(layout(data, head="CASE: Case = "))
    return f"{SPDX}{text}\n\n{loader}{cases}\n\n\n{_test_function(name, 'CASE')}"


def exported_harness(harness: str) -> str:
    """The harness as one file carries it: without the loaders of ``case.json`` (bundles) and of a suite's cases."""
    return harness[:harness.index("\n\ndef case_test(")].replace("from collections.abc import Callable\n", "", 1)


def test_name(signature: str) -> str:
    return "test_" + re.sub(r"\W+", "_", signature).strip("_")


def bundle_single_file(signature: str, expect: Expectation, data: dict[str, Any]) -> str:
    """A bundle's test and case (``case.json``) as one file needing only vLLM and pytest (an issue shows it)."""
    doc = _paragraphs(f"Regression test for gdnfuzz finding {signature}.", f"{expect.what()} {expect.result()}")
    return single_file(doc, data, test_name(signature), HARNESS.read_text())


def render_bundle_test(case: ExportedCase) -> str:
    """A crash bundle's test: its case is ``case.json`` beside it, its harness the crash store's (one per store)."""
    f = case.finding
    doc = _paragraphs(f"Regression test for gdnfuzz finding {f.signature}: {f.head.summary} (`report.md` says what "
                      f"it checks and expects; `gdnfuzz export-test` makes it one file).")
    return (f'"""{doc}\n"""\n\nimport sys\nfrom pathlib import Path\n\n'
            f"sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the crash store's harness\n"
            f"from {HARNESS_MODULE} import case_test  # noqa: E402\n\n"
            f"{test_name(f.signature)} = case_test(__file__)\n")


def _entry(case: ExportedCase) -> dict[str, Any]:
    """A case of the suite as its JSON file holds it: id, the finding it was, the data, and the xfail reason."""
    f = case.finding
    reason = None
    if case.expectation.vllm_bug:
        reason = f"vLLM bug ({f.head.summary}); upstream: {case.upstream or 'no upstream report recorded'}"
    return {"id": case.name, "found": f"{f.signature}: {f.head.summary} (with `{f.candidate}` against "
            f"`{f.reference}`)", "case": case.data, "xfail": reason}


def render_suite(cases: list[ExportedCase], configuration: dict[str, Any], command: str) -> dict[str, str]:
    """The suite as ``{file name: text}``: the harness, the test module, and its cases as JSON, by ``command``."""
    bugs = sum(c.expectation.vllm_bug for c in cases)
    doc = _paragraphs(
        'Mamba "align" prefix caching, replayed on request mixes that gdnfuzz found by fuzzing vLLM\'s scheduler: '
        f"`{HARNESS_MODULE}.suite_test` replays each case of `{Path(SUITE_FILE).with_suffix('.json')}` through the "
        "installed vLLM's real Scheduler and KV-cache manager and asserts what that module states (every hashed "
        "Mamba block holds the state its hash claims; every request computes what its prompt gives and finishes; "
        "a cost case costs no more than vLLM's split did). It checks vLLM's own split.",
        f"{len(cases)} cases; {bugs} of them are bugs of vLLM itself, marked xfail(strict=True) with their "
        "upstream report, so the suite passes today and tells when one is fixed.",
        f"Written by `{command}`.",
    )
    test = (f'{SPDX}"""{doc}\n"""\n\nimport pytest\n\nfrom .{HARNESS_MODULE} import suite_test\n\n'
            f"pytestmark = pytest.mark.cpu_test\n\n{SUITE_TEST} = suite_test(__file__)\n")
    entries = json.dumps([_entry(case) for case in cases], indent=2) + "\n"
    return {f"{HARNESS_MODULE}.py": harness_text(configuration), SUITE_FILE: test,
            str(Path(SUITE_FILE).with_suffix(".json")): entries}


def _installed_fails(f: Finding) -> bool:
    """Whether the installed vLLM's split shows a finding of ``f``'s class on its scenario (a replay)."""
    replayed = replay(f.minimized, resolve_policy(INSTALLED), resolve_policy(f.reference), SCHEDULER_TIER)
    sig = finding_signature(replayed.verdict, f.minimized, replayed.candidate, f.fail_on)
    return sig != "clean" and not sig.startswith("reference-side-")


def exported_case(f: Finding, notes: dict[str, str], name: str, checks: str) -> ExportedCase:
    """``f`` as a case named ``name`` of a test that ``checks`` the installed split or the candidate's."""
    neither = INSTALLED not in (f.candidate, f.reference) and checks == "installed"
    expect = expectation(f.signature, f.candidate, f.reference, checks, vllm_release(),
                         _installed_fails(f) if neither else None)
    data = case_data(f, executor_for(SCHEDULER_TIER).configuration(f.minimized))
    return ExportedCase(name, f, data, expect, notes.get("upstream"))
