"""Judging runs: the finding classes (a registry), the differential replay, the verdict, findings, signatures."""
