"""Exit codes shared by every gdnfuzz subcommand."""

CLEAN = 0  # nothing diverged
DIVERGED = 1  # a divergence, or a saved finding
BAD_INPUT = 2  # a malformed file, unknown policy, config vLLM rejects: one line on stderr
TIERS_DISAGREE = 3  # replay --tier both: sim and engine disagree on a scenario
