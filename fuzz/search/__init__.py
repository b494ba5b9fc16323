"""Finding inputs: the biased generator, structural mutation, the atheris harness, the run's settings
and supervisor, the reducer beside the fuzzers, libFuzzer plumbing."""
