"""Judging runs: the verdict (candidate against reference and truth), findings and their signatures."""
