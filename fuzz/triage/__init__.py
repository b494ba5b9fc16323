"""A finding's life after the fuzzer: confirm, verify, bisect, compare costs, coverage, ``gdnfuzz ci``."""
