"""Finding inputs: the biased generator, structural mutation, the atheris harness, libFuzzer plumbing."""
