"""Judging runs: the finding classes (a registry), the differential replay that runs and judges a
scenario, the verdict, findings and their signatures."""
