"""``gdnfuzz ci``'s JUnit XML (the Apache Ant schema CI systems read; validated in tests against it).

Two suites: ``gdnfuzz.replay`` (one test case per corpus file, named by its path from the corpus root's
own name, ``corpus/regressions/x.json``, wherever the corpus is installed) and ``gdnfuzz.fuzz`` (one
per signature found while fuzzing, or one case named ``fuzzing`` when none was: passing when inputs
ran, an error when the step ran none, skipped when it was not asked for; its figures are in the suite's
``system-out``). Invariant: a case fails exactly when its signature is new (not in the baseline, and the
reference right there); a known signature is a skipped case that names it and why, and a failure's text
carries the verdict and the command that replays it. When a baseline source could not be read, such a
signature is an error case instead (it may be known); a corpus file the overall time bound left unjudged
is an error case too. A run stopped by infrastructure (``CiReport.error``) has one more suite,
``gdnfuzz.setup``, whose one case is an error naming what failed. Names are the same from one run to
the next: what changes (times, counts) is in attributes and text.
"""

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
