"""The finding classes: one module each, defining ``FINDING_CLASS`` (``fuzz.oracle.verdict.FindingClass``).
``fuzz.oracle.verdict.finding_classes`` finds every module here, so adding a class is adding a module."""
