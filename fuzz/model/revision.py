"""A git revision of a vLLM checkout as a candidate checkout: :func:`materialized` writes its candidate files.
Invariants: the user's repository is only read; every git failure is one :class:`RevisionError` line; nothing is
written outside the temporary directory (a link out of the tree is a RevisionError naming the file)."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fuzz.errors import InputError
from fuzz.model.checkout import OVERLAID_FILES, OVERLAID_PACKAGES


class RevisionError(InputError):
    """A repository or revision that cannot be read (one line)."""


def git(repo: Path, *args: str, binary: bool = False) -> str | bytes:
    """``git -C repo ARGS``'s standard output; a failure is a RevisionError with git's first line."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except OSError as exc:
        raise RevisionError(f"{repo}: cannot run git ({exc})") from None
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[0]
        raise RevisionError(f"{repo}: git {args[0]}: {first}")
    return done.stdout if binary else done.stdout.decode(errors="replace")


def resolve(repo: Path, rev: str) -> str:
    """The full sha of the commit ``rev`` names in ``repo``."""
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        raise RevisionError(f"{repo}: not a git repository")
    try:
        if rev.startswith("-"):
            raise RevisionError(rev)
        return str(git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")).strip()
    except RevisionError:
        raise RevisionError(f"{repo}: no commit {rev!r}") from None


UPSTREAM_HEADS = ("refs/remotes/origin/HEAD", "refs/remotes/upstream/HEAD", "refs/remotes/origin/main",
                  "refs/remotes/upstream/main")  # where the default upstream branch is looked for, in order


def default_base(repo: Path) -> str:
    """The merge base of ``HEAD`` with the first of :data:`UPSTREAM_HEADS` that ``repo`` has."""
    resolve(repo, "HEAD")
    for ref in UPSTREAM_HEADS:
        try:
            found = resolve(repo, ref)
        except RevisionError:
            continue
        return str(git(repo, "merge-base", "HEAD", found)).strip()
    raise RevisionError(f"{repo}: no default upstream branch ({', '.join(UPSTREAM_HEADS)}) to take the merge base "
                        "with; pass --base REV")


def subject(repo: Path, sha: str) -> str:
    return str(git(repo, "log", "-1", "--format=%s", sha)).strip()


def is_ancestor(repo: Path, old: str, new: str) -> bool:
    """Whether commit ``old`` is an ancestor of (or is) commit ``new`` in ``repo`` (False where git cannot say)."""
    try:
        done = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", "--end-of-options", old, new],
                              capture_output=True, check=False)
    except OSError:
        return False
    return done.returncode == 0


def first_parent_range(repo: Path, old: str, new: str) -> list[str]:
    """The commits after ``old`` up to ``new`` on its first-parent line, oldest first; ``old`` must be an ancestor."""
    if not is_ancestor(repo, old, new):
        raise RevisionError(f"{repo}: {old[:12]} is not an ancestor of {new[:12]}")
    revs = str(git(repo, "rev-list", "--first-parent", "--reverse", f"{old}..{new}")).split()
    if not revs:
        raise RevisionError(f"{repo}: no commits between {old[:12]} and {new[:12]}")
    return revs


def extract(repo: Path, sha: str, dest: Path) -> Path:
    """Write the candidate checkout's files as they are at ``sha`` under ``dest``; returns ``dest``."""
    wanted = [*OVERLAID_PACKAGES, *OVERLAID_FILES]
    present = str(git(repo, "ls-tree", "--name-only", sha, "--", *wanted)).split()
    if not present:
        raise RevisionError(f"{repo}: {sha[:12]} has none of {', '.join(wanted)}")
    archive = git(repo, "archive", "--format=tar", sha, "--", *present, binary=True)
    assert isinstance(archive, bytes)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    except tarfile.FilterError as exc:  # a link out of the tree, an absolute path, a device: not written
        member = exc.tarinfo.name
        why = f"a link to {exc.tarinfo.linkname!r}, outside the tree" if exc.tarinfo.issym() or exc.tarinfo.islnk() \
            else str(exc)
        raise RevisionError(f"{repo}: {sha[:12]}: {member}: {why}") from None
    except (tarfile.TarError, OSError) as exc:
        raise RevisionError(f"{repo}: {sha[:12]}: cannot be written out ({type(exc).__name__}: {exc})") from None
    return dest


@contextmanager
def materialized(repo: Path, sha: str) -> Iterator[Path]:
    """A temporary checkout of ``sha`` (the candidate's files only), removed on exit."""
    root = Path(tempfile.mkdtemp(prefix=f"gdnfuzz-rev-{sha[:12]}-"))
    try:
        yield extract(repo, sha, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
