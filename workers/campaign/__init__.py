"""Continuous fuzzing on Ray: the driver, the fuzzer / crash store / verifier actors, and their tasks."""
