"""``report.md``: one finding's human-readable report, and the one call that stores a finding with it.

Invariant: the report is a function of the Finding, the bundle path and the installed vLLM; its evidence is the naming
class's ``report_section``, and what the test checks and expects is ``fuzz.report.expectation``'s sentence."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from fuzz.model.scenario import scenario_summary
from fuzz.oracle.finding import Finding, replay_argv
from fuzz.oracle.verdict import reference_is_wrong
from fuzz.plural import plural
from fuzz.report.expectation import INSTALLED, Expectation
from fuzz.report.exported_test import HARNESS, exported_case, harness_text, render_bundle_test
from fuzz.report.root_cause import cause_words
from fuzz.report.vllm_terms import model_words, serve_command, vllm_locations, vllm_release
from fuzz.store.bundle import CASE_FILE, TEST_FILE, save_finding, store_harness
from fuzz.tiers import SCHEDULER_TIER, executor_for


def render_report(f: Finding, bundle: Path, expect: Expectation) -> str:
    head = f.verdict.headline
    named = f.verdict.naming_class
    assert head is not None and named is not None
    e = f.minimized.engine
    findings = "\n".join(f"- `{x.kind}` ({x.side}): {x.summary}" for x in f.verdict.findings())
    where, body = named.report_section(f.verdict, f.minimized, f.candidate_run, f.reference_run,
                                       (f.candidate, f.reference))
    cause = cause_words(f)
    return f"""# {f.signature}

**{head.summary}** — candidate `{f.candidate}` against reference `{f.reference}` on the {f.tier} tier.
{where}

Engine: B={e.mamba_block_size}, attention block {e.block_size}, hash block {e.hash_block_size}, \
budget {e.max_num_batched_tokens} (per step {list(e.step_budgets) or '-'}), spec decode {e.spec_decode} \
({e.num_spec_tokens} tokens), retention {e.retention_interval}.

## Findings
{findings}

{body}{stacks(f)}
## Root cause
{sentence(cause) if cause else "Not located: no split decision of the candidate departs from the reference's "
 "on the same state, and vLLM's side shows neither an exception nor a poisoned slot."}

## In vLLM's terms
{vllm_section(f)}

## Reproduce
`{TEST_FILE}` in this directory is the finding as a pytest test that needs only vLLM and pytest \
(`pytest {bundle / TEST_FILE}`): its case is `{CASE_FILE}`, its harness the crash store's `{HARNESS.name}`. {expect.what()} {expect.result()} With gdnfuzz:
```
{shlex.join(replay_argv(str(bundle / 'scenario.json'), f.candidate, f.reference, f.tier, f.fail_on))}
```

## How to verify a fix
{verify_steps(f, bundle, expect)}

## Minimization
{minimization(f)}
"""


def sentence(text: str) -> str:
    """``text`` with its first letter upper-cased, unless it starts with ``vLLM``."""
    return text if text.startswith("vLLM") else text[0].upper() + text[1:]


def stacks(f: Finding) -> str:
    """The stack of each exception the finding holds (once where both sides raised the same)."""
    shown: list[str] = []
    for x in f.verdict.findings():
        stack = x.details.get("stack")
        if stack and stack not in shown:
            shown.append(stack)
    return "".join(f"\n## Exception stack\n```\n{stack}\n```\n" for stack in shown)


def verify_steps(f: Finding, bundle: Path, expect: Expectation) -> str:
    """How to show a fix works (vLLM's bug: its test on a fixed vLLM; the candidate's: replayed); ``verify-fixed``."""
    scenario = bundle / "scenario.json"
    if expect.vllm_bug or (reference_is_wrong(f.signature) and INSTALLED in (f.candidate, f.reference)):
        return "\n".join([
            f"1. Install a vLLM with the fix: `pytest {bundle / TEST_FILE}` passes (on vLLM {vllm_release()} it "
            "fails today).",
            f"2. Before installing it: `gdnfuzz replay {scenario} --candidate branch:<vLLM checkout with the fix> "
            "--reference vllm` runs the checkout's whole scheduling code; the finding moves to `reference-side-` "
            "(the checkout right, the installed vLLM wrong). A split-only fix can be given as the checkout "
            "directory itself.",
            f"3. `gdnfuzz verify-fixed {bundle} --checkout <checkout> --revision <rev>` records it in this bundle; "
            f"`gdnfuzz bisect {bundle} --fixed ...` finds the revision that fixed it."])
    return "\n".join([
        f"1. `gdnfuzz replay {scenario} --candidate <fixed split> --reference {f.reference}` exits 0 (it exits "
        f"non-zero with `{f.candidate}` today).",
        f"2. `gdnfuzz export-test {bundle} --checks candidate --candidate <fixed split>` writes the test of the "
        "fixed split: it passes.",
        f"3. `gdnfuzz verify-fixed {bundle} --candidate <fixed split>` records it in this bundle; "
        f"`gdnfuzz bisect {bundle} --checkout <vLLM checkout> --good <rev> --bad <rev>` finds the first bad "
        "revision of a vLLM branch that has the bug."])


def minimization(f: Finding) -> str:
    """Sizes before and after, the stages, and how minimization ended (cut short and why, or not run)."""
    before, after = scenario_summary(f.original), scenario_summary(f.minimized)
    sizes = (f"Original: {plural(before['requests'], 'request')}, {before['prompt_tokens']} prompt tokens; "
             f"minimized: {plural(after['requests'], 'request')}, {after['prompt_tokens']} prompt tokens, "
             f"{plural(len(f.candidate_run.steps), 'step')}.")
    if f.minimize_seconds is not None and f.minimize_seconds <= 0:
        return f"{sizes} Not minimized: stored as found, the run's deadline left no time to minimize it."
    if not f.stages:
        return f"{sizes} Not minimized here: the finding was stored as replayed."
    ended = (f"Cut short by its {f.minimize_seconds:g} s limit (the minimization time a run or campaign gives "
             "each finding, or what its deadline left): a longer one may shrink it further." if f.timed_out else
             "Ran to a fixpoint: no stage finds a smaller scenario with the same signature.")
    rows = "\n".join(f"| {s['name']} | {s['tried']} | {s['kept']} | {s['seconds']:.2f} |" for s in f.stages)
    return f"{sizes} {ended}\n\n| stage | tried | kept | seconds |\n|---|---:|---:|---:|\n{rows}"


def vllm_section(f: Finding) -> str:
    """The configuration as ``vllm serve`` flags and words, the vLLM it was found on, the code involved."""
    return "\n".join([f"```\n{serve_command(f.minimized.engine)}\n```",
                      *[f"- {w}" for w in model_words(f.minimized.engine)], f"- vLLM {vllm_release()}",
                      "- code: " + "; ".join(f"`{name}` (`{where}`)" for name, where in vllm_locations().items())])


def store_finding(f: Finding, crashes: Path, regressions: Path | None, replay: bool = False) -> Path:
    """Store ``f`` as a bundle with report, test and case, or count one more occurrence; returns the bundle dir.
    The crash store holds the one harness its bundles' tests import, written where it lacks today's."""

    def documents(bundle: Path) -> dict[str, str]:
        case = exported_case(f, {}, f.signature, "installed")
        store_harness(crashes, harness_text(executor_for(SCHEDULER_TIER).configuration(f.minimized)))
        return {"report.md": render_report(f, bundle, case.expectation), TEST_FILE: render_bundle_test(case),
                CASE_FILE: json.dumps(case.data, indent=2) + "\n"}

    return save_finding(f, crashes, regressions, documents, replay)

