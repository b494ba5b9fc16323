"""``gdnfuzz ci``'s SARIF 2.1.0 log (for code scanning): one rule and one result per signature found.

Invariant: each result points at the candidate's source (``fuzz.report.source_location``), has ``baselineState`` ``new``
(error) or ``unchanged`` (note), the signature as ``partialFingerprints`` and the replay command; an unread baseline,
an infrastructure ``error`` or unjudged ``problems`` make an unsuccessful invocation that says why."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from fuzz import HOMEPAGE
from fuzz.plural import plural
from fuzz.report.ci_report import CiReport
from fuzz.report.source_location import candidate_location

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def render_sarif(report: CiReport, source_root: Path, version: str) -> str:
    where = candidate_location(report.candidate, source_root)
    rules: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for sig, cases in sorted(report.signatures.items()):
        first = cases[0]
        new = not report.is_known(sig)
        rules.append({"id": sig, "name": "GdnfuzzDivergence",
                      "shortDescription": {"text": f"gdnfuzz signature {sig}"},
                      "fullDescription": {"text": first.summary or sig},
                      "defaultConfiguration": {"level": "error"}})
        text = (f"{'New' if new else 'Known'} gdnfuzz signature {sig} under candidate {report.candidate.spec} "
                f"against {report.reference.spec}: {first.summary} ({plural(len(cases), 'input')}, e.g. {first.name}). "
                f"Replay: {shlex.join(first.reproduce)}")
        results.append({
            "ruleId": sig, "ruleIndex": len(rules) - 1, "level": "error" if new else "note",
            "baselineState": "new" if new else "unchanged",
            "message": {"text": text},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": where.path, **({"uriBaseId": "SRCROOT"} if not where.path.startswith("/")
                                                          else {})},
                "region": {"startLine": where.line}},
                "message": {"text": f"the candidate's {where.what}"}}],
            "partialFingerprints": {"gdnfuzzSignature/v1": sig},
        })
    problems = [why for why in (report.error, report.baseline_error and
                                 f"the baseline could not be read: {report.baseline_error}", *report.problems) if why]
    log = {
        "$schema": SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "gdnfuzz", "version": version,
                                "informationUri": HOMEPAGE, "rules": rules}},
            "originalUriBaseIds": {"SRCROOT": {"uri": source_root.resolve().as_uri() + "/"}},
            "results": results,
            **({"invocations": [{"executionSuccessful": False, "toolExecutionNotifications": [
                {"level": "error", "message": {"text": why}} for why in problems]}]} if problems else {}),
        }],
    }
    return json.dumps(log, indent=1) + "\n"
