"""Regression test for gdnfuzz finding split-eagle-drop-runs-past: slot hashed as
state@16 holds state@1 (`report.md` says what it checks and expects; `gdnfuzz
export-test` makes it one file).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the crash store's harness
from mamba_align_replay import case_test  # noqa: E402

test_split_eagle_drop_runs_past = case_test(__file__)
