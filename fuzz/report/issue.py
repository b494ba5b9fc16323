"""The GitHub issue and comments rendered from a crash bundle (no network: see ``fuzz.report.github``).

Invariants: the title starts with the signature; the body stays under :data:`MAX_BODY`, cutting the appended report
first; everything a bundle says reaches title and bodies inert (``fuzz.report.inert``)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from fuzz.model.scenario import pretty_json, scenario_summary
from fuzz.oracle.finding import replay_argv
from fuzz.oracle.verdict import reference_is_wrong
from fuzz.plural import plural
from fuzz.report.expectation import Expectation, expectation
from fuzz.report.exported_test import bundle_single_file
from fuzz.report.inert import block, capped, code, text, title_text
from fuzz.report.lifecycle import lifecycle_rows
from fuzz.report.vllm_terms import model_words, serve_command, vllm_locations
from fuzz.store.bundle import ENVIRONMENT_KEYS, TEST_FILE, CrashBundle

MAX_TITLE = 256  # GitHub's limit on an issue title
MAX_BODY = 65_000  # GitHub rejects bodies over 65,536 characters


def _replay_argv(bundle: CrashBundle, scenario_path: str) -> list[str]:
    v = bundle.verdict
    return replay_argv(scenario_path, v["candidate"], v["reference"], v["tier"], v.get("fail_on", "correctness"))


def replay_command(bundle: CrashBundle) -> str:
    """The command that replays the minimized scenario, with the bundle's policies and tier."""
    return shlex.join(_replay_argv(bundle, f"crashes/{bundle.signature}/scenario.json"))


def regression_snippet(bundle: CrashBundle) -> str:
    """For a bundle without an exported test: a pytest test that runs ``gdnfuzz replay``."""
    data = {**bundle.scenario.to_dict(), **bundle.annotations}
    scenario_text = json.dumps(data, sort_keys=True, separators=(",", ":")).replace("'", "\\u0027")
    argv = repr(_replay_argv(bundle, "<scenario>")).replace("'<scenario>'", "str(path)")
    name = re.sub(r"\W", "_", bundle.signature)
    return (
        "import json\nimport subprocess\n\n"
        f"SCENARIO = json.loads(r'{scenario_text}')\n\n\n"
        f"# gdnfuzz {bundle.signature}: {bundle.verdict['summary']}\n"
        f"def test_gdnfuzz_{name}(tmp_path):\n"
        '    path = tmp_path / "scenario.json"\n'
        "    path.write_text(json.dumps(SCENARIO))\n"
        f"    run = subprocess.run({argv}, capture_output=True, text=True)\n"
        "    # gdnfuzz replay exits non-zero while the finding reproduces (1 diverged, 4 regressed), 0 once fixed.\n"
        "    assert run.returncode == 0, run.stdout + run.stderr\n"
    )


def issue_title(bundle: CrashBundle) -> str:
    """``gdnfuzz <signature>: <summary>``; the signature comes first so truncation keeps it."""
    title = f"gdnfuzz {bundle.signature}: {title_text(bundle.verdict['summary'])}"
    return title if len(title) <= MAX_TITLE else title[: MAX_TITLE - 1] + "…"


def title_names(title: str, signature: str) -> bool:
    """Whether ``title`` names ``signature`` as a whole word (not as a prefix of a longer one)."""
    return re.search(rf"(?<![A-Za-z0-9._-]){re.escape(signature)}(?![A-Za-z0-9_-]|\.[A-Za-z0-9])", title) is not None


def _marker(signature: str) -> str:
    return f"<!-- gdnfuzz-signature: {signature} -->"


def _table(rows: list[tuple[str, str]]) -> str:
    lines = ["| | |", "|---|---|"]
    for key, value in rows:
        cell = value.replace("|", "\\|")
        lines.append(f"| {key} | {cell} |")
    return "\n".join(lines)


def _facts(bundle: CrashBundle) -> str:
    v = bundle.verdict
    first = "—" if v["first_request"] is None else code(v["first_request"])
    if v["first_step"] is not None:
        first += f" at step {text(v['first_step'])}"
    return _table(
        [
            ("Signature", code(v["signature"])),
            ("Kind", text(v["kind"])),
            ("Candidate policy", code(v["candidate"])),
            ("Reference policy", code(v["reference"])),
            ("First divergent request", first),
            ("Found on tier", text(v["tier"])),
            ("Confirmation", text(_confirmation(v))),
            *lifecycle_rows(v),  # inert markdown already
        ]
    )


def _confirmation(v: dict[str, Any]) -> str:
    """The confirmed state and what decided it: the tier, the input and its first poisoned slot."""
    state = v.get("confirmed")
    if state is None:
        return "not yet run"
    evidence = v.get("confirmation") or {}
    decided = evidence.get("fallback") or evidence
    if "tier" not in decided:
        return state
    detail = ", ".join(filter(None, [f"{decided['tier']} tier", decided.get("input"),
                                     next(iter(decided.get("poisoned_slots") or []), None)]))
    return f"{state} ({detail})"


def _environment(bundle: CrashBundle) -> str:
    env = bundle.environment
    keys = [*ENVIRONMENT_KEYS, *sorted(k for k in env if k not in ENVIRONMENT_KEYS)]
    return _table([(text(k), code(env[k])) for k in keys])


def _scenario_block(bundle: CrashBundle) -> str:
    size, original = scenario_summary(bundle.scenario), scenario_summary(bundle.original)
    return (
        f"{block(pretty_json(bundle.scenario, bundle.annotations), 'json')}\n"
        f"{plural(size['requests'], 'request')}, {size['prompt_tokens']} prompt tokens "
        f"(minimized from {plural(original['requests'], 'request')}, {original['prompt_tokens']} prompt tokens)."
    )


def _fit(body: str, report: str) -> str:
    """``body`` plus the full report in a collapsed code block, cut to GitHub's limit (else ``capped`` itself)."""
    room = MAX_BODY - len(body) - 200
    if room <= 0:
        return capped(body, MAX_BODY)
    if len(report) > room:
        report = report[:room] + "\n\n… (truncated; the full report is report.md in the bundle)\n"
    return capped(f"{body}\n\n<details><summary>Full report</summary>\n\n{block(report, 'markdown')}\n</details>\n",
                  MAX_BODY)


def vllm_terms(bundle: CrashBundle) -> str:
    """The configuration as ``vllm serve`` flags and words, the code involved, the root cause."""
    knobs = bundle.scenario.engine
    lines = [block(serve_command(knobs), "sh"), *[f"- {w}" for w in model_words(knobs)],
             "- code: " + "; ".join(f"`{name}` (`{where}`)" for name, where in vllm_locations().items())]
    cause = (bundle.verdict.get("verdict") or {}).get("root_cause")
    written = _report_section(bundle.report, "Root cause")
    if written:  # the report's own: a disagreement of the candidate's, or vLLM's defect, with the deciding line
        lines.append(f"- root cause: {text(written[0].lower() + written[1:])}")
    elif cause and not reference_is_wrong(bundle.signature):
        lines.append(f"- root cause: at step {text(cause['step'])}, {code(cause['request_id'])} was offered "
                     f"{text(cause['offered'])} tokens from {text(cause['start'])}; {code(bundle.verdict['candidate'])} "
                     f"scheduled {text(cause['candidate'])} where {code(bundle.verdict['reference'])} scheduled "
                     f"{text(cause['reference'])} ({text(cause['departure'])} vLLM's {text(cause['decider'])} stop)")
    return "\n".join(lines)


def _report_section(report: str, title: str) -> str | None:
    """The text of ``report.md``'s section ``title``, or None where it has none."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", report, re.M | re.S)
    text = match.group(1).strip() if match else ""
    return text if text and not text.startswith("Not located") else None


def regression_test_expectation(bundle: CrashBundle) -> Expectation:
    """What the bundle's test checks and does on the vLLM the finding was judged on."""
    v = bundle.verdict
    return expectation(v["signature"], v["candidate"], v["reference"], "installed", bundle.environment["vllm"])


def _regression_test(bundle: CrashBundle) -> str:
    if bundle.test is None:
        return block(regression_snippet(bundle), "python")
    expect = regression_test_expectation(bundle)
    test = bundle.test if bundle.case is None else bundle_single_file(bundle.signature, expect, bundle.case)
    return (f"It needs only vLLM and pytest (`pytest {TEST_FILE}`). {expect.what()} {expect.result()}\n\n"
            f"<details><summary>{TEST_FILE}</summary>\n\n{block(test, 'python')}\n</details>")


def issue_body(bundle: CrashBundle) -> str:
    v = bundle.verdict
    body = "\n\n".join(
        [
            _marker(bundle.signature),
            f"## What diverged\n\n**{text(v['kind'])}**: {text(v['summary'])}\n\n{_facts(bundle)}",
            f"## In vLLM's terms\n\n{vllm_terms(bundle)}",
            f"## Regression test\n\n{_regression_test(bundle)}",
            f"## Environment\n\n{_environment(bundle)}",
            f"## Minimized scenario\n\n{_scenario_block(bundle)}",
            f"## Replay with gdnfuzz\n\n{block(replay_command(bundle), 'sh')}\n"
            "It exits non-zero while the finding reproduces (1: diverged, 4: regressed), 0 once fixed.",
        ]
    )
    return _fit(body, bundle.report)


def comment_body(bundle: CrashBundle) -> str:
    """A new occurrence of a signature that already has an open issue."""
    return capped("\n\n".join(
        [
            _marker(bundle.signature),
            f"gdnfuzz found this signature again: **{text(bundle.verdict['kind'])}**: {text(bundle.verdict['summary'])}",
            _facts(bundle),
            f"Environment:\n\n{_environment(bundle)}",
            f"<details><summary>Minimized scenario of this occurrence</summary>\n\n{_scenario_block(bundle)}\n"
            "</details>",
            block(replay_command(bundle), "sh"),
        ]
    ), MAX_BODY)



def _checked(bundle: CrashBundle, record: dict[str, Any]) -> str:
    """What a verification ran (the candidate, the tries and hits, the canary), and the ranges known."""
    checked = (f"Checked: {text(record['candidate'])}; {text(record['hits'])} of {text(record['tries'])} tries "
               f"reproduced; canary: {text(record.get('canary') or 'not run')}.")
    rows = lifecycle_rows(bundle.verdict)  # the ranges known so far, inert markdown already
    return f"{checked}\n\n{_table(rows)}" if rows else checked


def verify_comment(bundle: CrashBundle, record: dict[str, Any], reproduces: bool) -> str:
    """The comment on a finding's issue as ``verify-fixed`` closes it (gone) or reopens it (back), and what was checked."""
    said = "**reproduces again**, reopening" if reproduces else "**no longer reproduces**, closing"
    return capped("\n\n".join([
        _marker(bundle.signature),
        f"gdnfuzz verify-fixed: {said}. {_checked(bundle, record)}",
        block(replay_command(bundle), "sh"),
    ]), MAX_BODY)
