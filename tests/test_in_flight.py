"""A worker's in-flight record (``fuzz.search.in_flight``) is read whole or not at all, while it is rewritten."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fuzz.search.in_flight import InFlight, died_on

ROOT = Path(__file__).resolve().parents[1]
WRITER = """
import sys
from pathlib import Path
from fuzz.search.in_flight import InFlight
record = InFlight(Path(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    for size in (4096, 900, 17, 1):  # each record shorter than the one before it
        record.start(bytes([size % 251]) * size)
    record.done()
"""


def test_a_reader_never_sees_a_torn_record_while_shorter_ones_are_written(tmp_path: Path) -> None:
    written = {bytes([size % 251]) * size for size in (4096, 900, 17, 1)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "3000"], cwd=ROOT)
    seen = set()
    try:
        while writer.poll() is None:
            got = died_on(tmp_path)
            assert got is None or got in written, f"a torn record of {len(got)} bytes"
            seen.add(got)
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert len(seen - {None}) >= 1  # the reader did see records while they were rewritten


def test_a_record_is_there_while_its_input_runs_and_gone_after(tmp_path: Path) -> None:
    record = InFlight(tmp_path)
    assert died_on(tmp_path) is None
    record.start(b"an input")
    assert died_on(tmp_path) == b"an input"
    record.done()
    assert died_on(tmp_path) is None
    (tmp_path / ".in-flight").write_bytes(b"\x01\x09" + bytes(11) + b"short")  # a frame that promises more
    assert died_on(tmp_path) is None
