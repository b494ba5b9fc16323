"""A finding's life after the fuzzer: confirm it on real state, verify it against new builds, bisect it,
compare costs, measure coverage, and ``gdnfuzz ci``'s pipeline."""
