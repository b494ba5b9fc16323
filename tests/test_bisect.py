"""gdnfuzz bisect over a real git history of the installed vLLM's own scheduling files.

vLLM's full history is too large to bring onto these machines (and they have no network), so the
repository is built here (``lifecycle_fixtures.vllm_history``): the installed ``vllm/v1/core`` sources,
a commit that puts the pre-#51113 split in, unrelated commits, one whose split does not parse, and
a commit that restores the fix.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from checkout_fixtures import SCHEDULER, make_checkout, replace_split
from conftest import seed_case
from lifecycle_fixtures import HISTORY, real_bundle, vllm_history

from fuzz.cli import main
from fuzz.model.revision import RevisionError, materialized
from fuzz.report.issue import issue_body
from fuzz.store.bundle import BundleError, load_bundle
from fuzz.triage.bisect import search


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    repo = tmp_path_factory.mktemp("vllm-history") / "vllm"
    return repo, vllm_history(repo)


def _bundle(tmp_path: Path) -> Path:
    return real_bundle(tmp_path / "crashes")


def _untouched(repo: Path, head: str) -> None:
    git = ["git", "-C", str(repo)]
    assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    assert subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip() == head
    assert not list(repo.rglob("__pycache__"))


@pytest.mark.slow
def test_bisect_names_the_commit_that_broke_it_and_skips_the_unloadable_one(tmp_path, history, capsys):
    repo, sha = history
    bundle = _bundle(tmp_path)
    assert main(["bisect", str(bundle), "--checkout", str(repo), "--good", sha["A"], "--bad", sha["G"]]) == 0
    out = capsys.readouterr().out
    print(out)  # the log, for the record
    capsys.readouterr()
    assert main(["bisect", str(bundle), "--checkout", str(repo), "--good", sha["A"], "--bad", sha["G"], "--json"]) == 0
    captured = capsys.readouterr()
    assert "bisect:" not in captured.out  # the log went to stderr; stdout ends with the one object
    assert json.loads(captured.out.splitlines()[-1])["record"]["first_bad"] == sha["B"] and "first bad revision" in captured.err
    subjects = dict(HISTORY)
    assert f"{sha['D'][:12]} {subjects['D']}: skipped: " in out and "syntax error" in out
    assert "loaded 4 of 7 revisions; skipped 1: " + sha["D"][:12] in out
    assert f"first bad revision: {sha['B'][:12]} {subjects['B']}; last good: {sha['A'][:12]}" in out
    found = json.loads((bundle / "verdict.json").read_text())["regression_range"]
    assert (found["first_bad"], found["last_good"], found["skipped"]) == (sha["B"], sha["A"], [sha["D"]])
    assert (found["subject"], found["mode"], found["loaded"], found["revisions"]) == (subjects["B"], "split", 4, 7)
    body = issue_body(load_bundle(bundle))
    assert f"| Regression range | first bad `{sha['B'][:12]}` ({subjects['B']}), last good `{sha['A'][:12]}`" in body
    assert f"first bad `{sha['B'][:12]}`" in (bundle / "report.md").read_text()
    _untouched(repo, sha["J"])


@pytest.mark.slow
def test_bisect_fixed_names_the_commit_that_fixed_it(tmp_path, history, capsys):
    repo, sha = history
    bundle = _bundle(tmp_path)
    argv = ["bisect", str(bundle), "--checkout", str(repo), "--bad", sha["B"], "--good", sha["J"], "--fixed"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    print(out)
    subjects = dict(HISTORY)
    assert "loaded 5 of 9 revisions" in out
    assert f"first fixed revision: {sha['H'][:12]} {subjects['H']}; last bad: {sha['G'][:12]}" in out
    fixed = load_bundle(bundle).verdict["fixed_in"]
    assert (fixed["revision"], fixed["subject"], fixed["last_bad"]) == (sha["H"], subjects["H"], sha["G"])
    row = f"| Fixed in | `{sha['H'][:12]}` ({subjects['H']}), last bad `{sha['G'][:12]}`"
    assert row in issue_body(load_bundle(bundle))
    _untouched(repo, sha["J"])


@pytest.mark.slow
def test_bisect_in_whole_branch_mode(tmp_path, history, capsys):
    """Each revision's whole scheduling code runs in a candidate process of its own (one per revision)."""
    repo, sha = history
    bundle = _bundle(tmp_path)
    argv = ["bisect", str(bundle), "--checkout", str(repo), "--good", sha["A"], "--bad", sha["B"], "--mode", "branch"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "loaded 2 of 2 revisions" in out and f"first bad revision: {sha['B'][:12]}" in out
    assert load_bundle(bundle).verdict["regression_range"]["mode"] == "branch"
    _untouched(repo, sha["J"])


@pytest.mark.slow
@pytest.mark.parametrize("ends, message", [
    (("B", "G"), "--good {B}: expected a revision where the finding does not reproduce, but the finding reproduces"),
    (("A", "J"), "--bad {J}: expected a revision where the finding reproduces, but the finding does not reproduce"),
    (("G", "A"), "{G} is not an ancestor of {A}"),
    (("A", "no-such-rev"), "no commit 'no-such-rev'"),
    (("D", "G"), "--good {D}: expected a revision where the finding does not reproduce, but cannot be loaded"),
])
def test_ends_that_are_not_what_they_are_said_to_be_are_one_line_exit_2(tmp_path, history, capsys, ends, message):
    repo, sha = history
    bundle = _bundle(tmp_path)
    good, bad = (sha.get(e, e) for e in ends)
    assert main(["bisect", str(bundle), "--checkout", str(repo), "--good", good, "--bad", bad]) == 2
    err = capsys.readouterr().err
    assert message.format(**{k: v[:12] for k, v in sha.items()}) in err and len(err.strip().splitlines()) == 1
    assert "regression_range" not in json.loads((bundle / "verdict.json").read_text())


def test_search_goes_around_skipped_revisions_and_says_when_they_leave_it_open():
    probes: list[int] = []

    def probe(bad_from: int, unloadable: set[int]):
        def run(i: int) -> str:
            probes.append(i)
            return "skipped" if i in unloadable else ("changed" if i >= bad_from else "unchanged")
        return run

    found = search(16, probe(11, {7, 8}))
    assert (found.before, found.first, found.open_between()) == (10, 11, [11]) and probes[0] == 7
    probes.clear()
    found = search(8, probe(4, {3}))
    assert found.open_between() == [3, 4]  # 2 unchanged, 3 cannot be loaded, 4 changed: 3 or 4 broke it


@pytest.mark.parametrize("field, value, where", [
    ("reproducibility", {"tries": 2, "hits": 3}, "reproducibility.hits"),
    ("reproducibility", {"tries": 0, "hits": 0}, "reproducibility.tries"),
    ("verifications", {"vllm 0.33.0": {"status": "gone", "tries": 1, "hits": 0, "candidate": "x"}},
     "verifications.vllm 0.33.0.status"),
    ("fixed_in", {"candidate": 3}, "fixed_in.candidate"),
    ("regression_range", {"first_bad": "a", "subject": "s", "last_good": "b", "checkout": "c", "mode": "both",
                          "skipped": [], "loaded": 1, "revisions": 2}, "regression_range.mode"),
])
def test_bad_lifecycle_fields_name_file_and_field(tmp_path, capsys, field, value, where):
    bundle = _bundle(tmp_path)
    data = json.loads((bundle / "verdict.json").read_text())
    (bundle / "verdict.json").write_text(json.dumps({**data, field: value}))
    with pytest.raises(BundleError, match=f"verdict.json: {where.replace('.', '[.]')}:"):
        load_bundle(bundle)
    assert main(["verify-fixed", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert f"verdict.json: {where}:" in err and len(err.strip().splitlines()) == 1


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, subject: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=dev", "-c", "user.email=dev@example.invalid", "commit", "-q", "-m", subject)
    return _git(repo, "rev-parse", "HEAD")


def test_a_binary_scheduler_in_a_checkout_is_one_line_exit_2(tmp_path, capsys):
    scheduler = tmp_path / "checkout" / SCHEDULER
    scheduler.parent.mkdir(parents=True)
    scheduler.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" * 8)
    assert main(["replay", str(seed_case()), "--candidate", str(tmp_path / "checkout")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{scheduler}: not UTF-8 text (byte 0)" in err[0], err


@pytest.mark.parametrize("target", ["/etc/passwd", "../../../../../../etc/passwd"])
def test_a_revision_with_a_link_out_of_the_tree_is_refused_naming_it(tmp_path, target):
    repo = tmp_path / "repo"
    (repo / "vllm" / "v1" / "core").mkdir(parents=True)
    (repo / "vllm" / "v1" / "core" / "__init__.py").write_text("")
    (repo / "vllm" / "v1" / "core" / "evil.py").symlink_to(target)
    _git(repo, "init", "-q", "-b", "main")
    sha = _commit(repo, "a link out of the tree")
    with pytest.raises(RevisionError, match=f"{sha[:12]}: vllm/v1/core/evil.py: a link to {target!r}, outside"), \
            materialized(repo, sha):
        pass
    assert not list(Path(tempfile.gettempdir()).glob(f"gdnfuzz-rev-{sha[:12]}-*"))  # nothing left behind


@pytest.mark.slow
def test_bisect_skips_a_binary_scheduler_and_a_link_out_of_the_tree(tmp_path, capsys):
    repo = make_checkout(tmp_path / "vllm")
    scheduler = repo / SCHEDULER
    installed = scheduler.read_text()
    _git(repo, "init", "-q", "-b", "main")
    good = _commit(repo, "[Core] v1 core as installed")
    scheduler.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff" * 8)
    binary = _commit(repo, "[Misc] A binary scheduler")
    scheduler.write_text(installed)
    (repo / "vllm" / "v1" / "core" / "evil.py").symlink_to("/etc/passwd")
    link = _commit(repo, "[Misc] A link out of the tree")
    (repo / "vllm" / "v1" / "core" / "evil.py").unlink()
    replace_split(repo)
    first_bad = _commit(repo, "[Core] The pre-#51113 split")
    (repo / "VERSION").write_text("0.33.0.dev\n")
    bad = _commit(repo, "[Misc] Bump version")
    bundle = _bundle(tmp_path)
    assert main(["bisect", str(bundle), "--checkout", str(repo), "--good", good, "--bad", bad]) == 0
    out = capsys.readouterr().out
    print(out)
    assert f"{binary[:12]} [Misc] A binary scheduler: skipped: " in out and "not UTF-8 text" in out
    assert f"{link[:12]} [Misc] A link out of the tree: skipped: " in out
    assert "vllm/v1/core/evil.py: a link to '/etc/passwd', outside the tree" in out
    assert f"the first bad revision is one of {binary[:12]}, {link[:12]}, {first_bad[:12]}" in out
    assert load_bundle(bundle).verdict["regression_range"]["skipped"] == [link, binary]
    _untouched(repo, bad)
