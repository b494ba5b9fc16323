"""The one atomic write (issue 15, items 4 and 6): no planted symlink is followed, modes follow the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from bundle_fixtures import write_bundle

from fuzz.errors import InputError
from fuzz.report.github import file_issue
from fuzz.store.atomic import HOST, LEFTOVER_AGE_S, atomic_write, sweep_leftovers, temporary_name

ROOT = Path(__file__).resolve().parent.parent


def test_a_symlink_at_the_target_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "out.json").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        atomic_write(tmp_path / "out.json", "x")
    assert victim.read_text() == "precious"


def test_a_symlink_planted_at_a_temporary_name_is_not_followed(tmp_path, monkeypatch):
    """The attack of issue 15: a link planted where the temporary file will be created."""
    import fuzz.store.atomic as atomic

    victim = tmp_path / "victim"
    victim.write_text("precious")
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda n: "planted")
    (tmp_path / atomic.temporary_name("issue.md")).symlink_to(victim)
    with pytest.raises(FileExistsError):
        atomic_write(tmp_path / "issue.md", "x")
    assert victim.read_text() == "precious" and not (tmp_path / "issue.md").exists()


def test_file_issue_dry_run_refuses_a_planted_issue_md_link(tmp_path):
    bundle = write_bundle(tmp_path / "crashes", "poisoned-slot.x.1234")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (bundle / "issue.md").symlink_to(victim)
    with pytest.raises(InputError):
        file_issue(bundle, "octo/vllm", dry_run=True)
    assert victim.read_text() == "precious" and (bundle / "issue.md").is_symlink()


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_get_the_mode_the_umask_gives(tmp_path, umask, mode):
    """Run in a fresh interpreter: the module reads the umask once, when imported."""
    out = tmp_path / "f.json"
    code = f"import os; os.umask({umask}); from fuzz.store.atomic import atomic_write; atomic_write({str(out)!r}, 'x')"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    assert stat.S_IMODE(os.stat(out).st_mode) == mode


def test_a_killed_writers_temporaries_are_swept_and_no_live_writers(tmp_path):
    """A campaign node killed mid-write leaves a staging directory or a temporary file; the next run on the
    store removes them, never one a live process on this host, or any process on another host, writes."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    bundle = tmp_path / "crashes" / "sig"
    bundle.mkdir(parents=True)
    staging = tmp_path / "crashes" / f".staging.{HOST}.{dead_pid}.0123456789ab.tmp"
    (staging / "sig").mkdir(parents=True)
    (staging / "sig" / "scenario.json").write_text("{}")
    killed = bundle / f".verdict.json.{HOST}.{dead_pid}.0123456789ab.tmp"
    killed.write_text("{")
    live = bundle / temporary_name("scenario.json")
    live.write_text("{")
    elsewhere = bundle / f".scenario.json.otherhost.{dead_pid}.0123456789ab.tmp"
    elsewhere.write_text("{")
    old = bundle / ".report.md.0123456789ab.tmp"  # an older gdnfuzz's name: swept once it is old
    old.write_text("x")
    young = bundle / ".notes.md.0123456789ab.tmp"
    young.write_text("x")
    past = os.stat(old).st_mtime - LEFTOVER_AGE_S - 1
    os.utime(old, (past, past))
    assert sorted(sweep_leftovers(tmp_path / "crashes")) == sorted([staging, killed, old])
    assert live.exists() and elsewhere.exists() and young.exists() and bundle.is_dir()
