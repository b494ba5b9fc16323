"""Regression test for gdnfuzz finding
both-side-exception-valueerror-no-spec-kv-connector: exception: ValueError: Cannot
get 1 free blocks from the pool (`report.md` says what it checks and expects;
`gdnfuzz export-test` makes it one file).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the crash store's harness
from mamba_align_replay import case_test  # noqa: E402

test_both_side_exception_valueerror_no_spec_kv_connector = case_test(__file__)
