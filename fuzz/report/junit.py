"""``gdnfuzz ci``'s JUnit XML (Apache Ant schema): suites ``gdnfuzz.replay``, ``gdnfuzz.fuzz``, ``gdnfuzz.setup``.

Invariant: a case fails exactly when its signature is new; a known one is skipped, naming why; an unchecked signature,
an unjudged corpus file, a fuzzing step without input or an infrastructure stop is an error; names are stable."""

from __future__ import annotations

import shlex
import socket
import time
import xml.etree.ElementTree as ET

from fuzz.report.ci_report import Case, CiReport

FUZZ_CASE = "fuzzing"  # the fuzzing step's case when it found nothing


def _outcome(case: Case, baseline_error: str | None) -> tuple[str, dict[str, str], str] | None:
    """The case's JUnit element (``failure``, ``error`` or ``skipped``), its attributes and text; None: passed."""
    if case.problem is not None:
        return "error", {"message": case.problem, "type": "gdnfuzz.not-judged"}, case.problem
    if case.signature == "clean":
        return None
    text = f"verdict {case.status}: {case.summary}\nreplay: {shlex.join(case.reproduce)}"
    if case.new and baseline_error is not None:
        return "error", {"message": f"signature {case.signature} could not be checked: {baseline_error}",
                         "type": "gdnfuzz.baseline-unreadable"}, text
    if case.new:
        return "failure", {"message": f"new signature {case.signature}", "type": "gdnfuzz.new-signature"}, text
    return "skipped", {"message": f"known signature {case.signature} ({case.known})"}, text


def _suite(root: ET.Element, index: int, name: str, cases: list[tuple[Case, tuple[str, dict[str, str], str] | None]],
           stamp: str, out: str = "") -> None:
    kinds = [o[0] if o else "passed" for _, o in cases]
    suite = ET.SubElement(root, "testsuite", name=name, package="gdnfuzz", id=str(index), timestamp=stamp,
                          hostname=socket.gethostname() or "localhost", tests=str(len(cases)),
                          failures=str(kinds.count("failure")), errors=str(kinds.count("error")),
                          skipped=str(kinds.count("skipped")), time=f"{sum(c.seconds for c, _ in cases):.3f}")
    ET.SubElement(suite, "properties")
    for case, outcome in cases:
        el = ET.SubElement(suite, "testcase", name=case.name, classname=f"gdnfuzz.{case.phase}",
                           time=f"{case.seconds:.3f}")
        if outcome is not None:
            tag, attributes, text = outcome
            ET.SubElement(el, tag, **attributes).text = text
    ET.SubElement(suite, "system-out").text = out or None
    ET.SubElement(suite, "system-err")


def _fuzz_cases(report: CiReport) -> list[tuple[Case, tuple[str, dict[str, str], str] | None]]:
    found = [c for c in report.cases if c.phase == "fuzz"]
    if found:
        return [(c, _outcome(c, report.baseline_error)) for c in found]
    case = Case(FUZZ_CASE, "fuzz", "clean", "clean", "", report.fuzz_seconds)
    if not report.fuzz_asked:
        return [(case, ("skipped", {"message": "not asked for (--fuzz-time 0)"}, ""))]
    problem = report.fuzz_problem
    return [(case, None if problem is None else ("error", {"message": problem, "type": "gdnfuzz.no-input"}, problem))]


def render_junit(report: CiReport) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    root = ET.Element("testsuites")
    replayed = [(c, _outcome(c, report.baseline_error)) for c in report.cases if c.phase == "replay"]
    _suite(root, 0, "gdnfuzz.replay", replayed, stamp, report.time_bound or "")
    _suite(root, 1, "gdnfuzz.fuzz", _fuzz_cases(report), stamp, report.fuzz_figures())
    if report.error is not None:
        _suite(root, 2, "gdnfuzz.setup", [(Case("load both sides", "setup", "clean", "error", "", 0.0),
                                           ("error", {"message": report.error, "type": "gdnfuzz.infrastructure"},
                                            report.error))], stamp)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
