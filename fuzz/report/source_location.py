"""Where a candidate's finding points: a file the candidate really runs, at a 1-based line.

Whole-branch mode: the first overlaid file differing from the installed vLLM, at its first changed line; else the
split's first line. The path is relative to ``source_root`` when under it, else absolute."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fuzz.model.checkout import CHECKOUT_SCHEDULER_SPLIT, changed_files, split_line
from fuzz.model.policies import Policy


@dataclass(frozen=True)
class SourceLocation:
    path: str
    line: int
    what: str  # "changed file" or "split function"


def _relative(path: Path, root: Path) -> str:
    path = path.resolve()
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def candidate_location(policy: Policy, source_root: Path) -> SourceLocation:
    if policy.checkout is not None:
        checkout = Path(policy.checkout)
        changed = changed_files(checkout)
        if changed:
            return SourceLocation(_relative(checkout / changed[0].path, source_root), changed[0].line, "changed file")
        scheduler = checkout / CHECKOUT_SCHEDULER_SPLIT
        return SourceLocation(_relative(scheduler, source_root), split_line(checkout), "split function")
    file, line = policy.defined_at()
    return SourceLocation(_relative(Path(file), source_root), line, "split function")
