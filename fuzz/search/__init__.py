"""Finding inputs: generator, mutation, harness, run settings, supervisor, reducer, libFuzzer plumbing."""
