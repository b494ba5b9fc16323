"""Regression test for gdnfuzz finding
reference-side-poison-unaligned-end-eagle-family-internal-checkpoint: slot hashed as
state@1600 holds state@1584 (`report.md` says what it checks and expects; `gdnfuzz
export-test` makes it one file).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the crash store's harness
from mamba_align_replay import case_test  # noqa: E402

test_reference_side_poison_unaligned_end_eagle_family_internal_checkpoint = case_test(__file__)
