"""libFuzzer flags that re-run the target: merges work through the wrapper, the rest are refused (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["-fork=2", "-jobs=4", "-workers=2", "-minimize_crash=1"])
def test_flags_that_rerun_the_target_are_refused(tmp_path, capsys, flag):
    assert main(["run", "--corpus", str(tmp_path), "--crashes", str(tmp_path / "c"), "--", flag]) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "gdnfuzz" in err and len(err.splitlines()) == 1


def test_merge_needs_its_directories(tmp_path, capsys):
    assert main(["run", "--", "-merge=1", str(tmp_path / "missing"), str(tmp_path)]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_run_merge_1_merges(tmp_path, capsys):
    out, queue = tmp_path / "out", tmp_path / "in"
    out.mkdir()
    queue.mkdir()
    regressions = ROOT / "corpus" / "regressions"
    for path in [*sorted(regressions.glob("pr51113-resume-at-3*.json")), regressions / "pr51113-concurrent-prefills.json"]:
        (queue / path.name).write_bytes(path.read_bytes())
    code = main(["run", "--candidate", "pre-51113", "--crashes", str(tmp_path / "crashes"), "--",
                 "-merge=1", str(out), str(queue)])
    assert code == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("gdnfuzz merge (-merge=1):")
    assert len(list(out.iterdir())) >= 1
    stored = [line.rsplit(": ", 1)[1] for line in said[1:]]  # every input that diverged is named, none silently
    assert stored and all(line.startswith("gdnfuzz merge: an input diverged while merging") for line in said[1:])
    assert sorted(stored) == sorted(str(p.parent) for p in (tmp_path / "crashes").glob("*/verdict.json"))


@pytest.mark.slow
def test_prune_names_an_oversized_queue_entry_and_leaves_it_sparse(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    workdir = corpus / "queue" / "fuzzer-0"
    workdir.mkdir(parents=True)
    (workdir / "a").write_bytes((ROOT / "corpus" / "regressions" / "pr51113-resume-at-331-partial.json").read_bytes())
    big = workdir / "big"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # a sparse gigabyte: no block on disk
    assert main(["prune", "--corpus", str(corpus), "--crashes", str(tmp_path / "crashes")]) == 0
    out, err = capsys.readouterr()
    assert f"gdnfuzz prune: skipped {big}: larger than libFuzzer's -max_len (16384 bytes); left as it is" in err
    assert "gdnfuzz prune: 1 input -> " in out and "1 oversized input skipped" in out
    assert big.stat().st_size == 1 << 30 and big.stat().st_blocks == 0  # never read whole nor rewritten dense
    assert not list(corpus.rglob("*.tmp")) and sum(p.stat().st_blocks for p in corpus.rglob("*") if p.is_file()) < 64
