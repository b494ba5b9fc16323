"""``gdnfuzz ci``'s JUnit XML (the Apache Ant schema CI systems read; validated in tests against it).

Two suites: ``gdnfuzz.replay`` (one test case per corpus file) and ``gdnfuzz.fuzz`` (one per signature
found while fuzzing, or one passing case when nothing was). Invariant: a case fails exactly when its
signature is new (not in the baseline, and the reference right there); a known signature is a skipped
case that names it and why, and a failure's text carries the verdict and the command that replays it.
When a baseline source could not be read, such a signature is an error case instead (it may be known).
A run stopped by infrastructure (``CiReport.error``) has one more suite, ``gdnfuzz.setup``, whose one
case is an error naming what failed.
"""

from __future__ import annotations

import shlex
import socket
import time
import xml.etree.ElementTree as ET

from fuzz.report.ci_report import Case, CiReport


def _testcase(suite: ET.Element, case: Case, baseline_error: str | None) -> None:
    el = ET.SubElement(suite, "testcase", name=case.name, classname=f"gdnfuzz.{case.phase}", time=f"{case.seconds:.3f}")
    if case.signature == "clean":
        return
    text = f"verdict {case.status}: {case.summary}\nreplay: {shlex.join(case.reproduce)}"
    if case.new and baseline_error is not None:
        ET.SubElement(el, "error", message=f"signature {case.signature} could not be checked: {baseline_error}",
                      type="gdnfuzz.baseline-unreadable").text = text
    elif case.new:
        ET.SubElement(el, "failure", message=f"new signature {case.signature}", type="gdnfuzz.new-signature"
                      ).text = text
    else:
        ET.SubElement(el, "skipped", message=f"known signature {case.signature} ({case.known})").text = text


def _suite(root: ET.Element, index: int, name: str, cases: list[Case], stamp: str, baseline_error: str | None) -> None:
    new = sum(c.new for c in cases)
    suite = ET.SubElement(root, "testsuite", name=name, package="gdnfuzz", id=str(index), timestamp=stamp,
                          hostname=socket.gethostname() or "localhost", tests=str(len(cases)),
                          failures=str(0 if baseline_error else new), errors=str(new if baseline_error else 0),
                          skipped=str(sum(c.signature != "clean" and not c.new for c in cases)),
                          time=f"{sum(c.seconds for c in cases):.3f}")
    ET.SubElement(suite, "properties")
    for case in cases:
        _testcase(suite, case, baseline_error)
    ET.SubElement(suite, "system-out")
    ET.SubElement(suite, "system-err")


def _setup_error(root: ET.Element, error: str, stamp: str) -> None:
    suite = ET.SubElement(root, "testsuite", name="gdnfuzz.setup", package="gdnfuzz", id="2", timestamp=stamp,
                          hostname=socket.gethostname() or "localhost", tests="1", failures="0", errors="1",
                          skipped="0", time="0.000")
    ET.SubElement(suite, "properties")
    case = ET.SubElement(suite, "testcase", name="load both sides", classname="gdnfuzz.setup", time="0.000")
    ET.SubElement(case, "error", message=error, type="gdnfuzz.infrastructure").text = error
    ET.SubElement(suite, "system-out")
    ET.SubElement(suite, "system-err")


def render_junit(report: CiReport) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    root = ET.Element("testsuites")
    replayed = [c for c in report.cases if c.phase == "replay"]
    fuzzed = [c for c in report.cases if c.phase == "fuzz"] or [
        Case(f"{report.fuzz_seconds:.0f}s of fuzzing, {report.fuzz_execs} inputs", "fuzz", "clean", "clean", "",
             report.fuzz_seconds)]
    _suite(root, 0, "gdnfuzz.replay", replayed, stamp, report.baseline_error)
    _suite(root, 1, "gdnfuzz.fuzz", fuzzed, stamp, report.baseline_error)
    if report.error is not None:
        _setup_error(root, report.error, stamp)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
