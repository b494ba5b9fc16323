"""The finding classes: one module each, defining ``FINDING_CLASS`` (``fuzz.oracle.verdict.FindingClass``).

Every module here is found by ``fuzz.oracle.verdict.finding_classes``; adding a class is adding a module.
"""
