"""libFuzzer flags that re-run the target (``argv[0]``, not executable here): ``-merge=1`` and ``-set_cover_merge=1``
run through ``fuzz.store.corpus_merge``, the others (:data:`REFUSED`) raise :class:`RerunFlagRefused` (exit 2).
Invariant: no flag of that family ever reaches a fuzzing worker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import InputError
from fuzz.oracle.verdict import FailOn
from fuzz.search.settings import RunSettings

MERGE_MODES = ("-merge", "-set_cover_merge")
REFUSED = {
    "-fork": "use `gdnfuzz run -j N` (N worker processes, restarted when they die)",
    "-jobs": "use `gdnfuzz run -j N`",
    "-workers": "use `gdnfuzz run -j N`",
    "-minimize_crash": "use `gdnfuzz minimize FILE` (it keeps the signature, not just any crash)",
    "-cleanse_crash": "use `gdnfuzz minimize FILE`",
    "-merge_inner": "it is libFuzzer's own; use -merge=1 or `gdnfuzz merge`",
}


class RerunFlagRefused(InputError):
    """A libFuzzer flag whose mode re-runs the target and that gdnfuzz does another way."""


@dataclass(frozen=True)
class MergeRequest:
    mode: str  # "-merge=1" or "-set_cover_merge=1"
    out: Path
    inputs: list[Path]
    flags: tuple[str, ...]  # the other libFuzzer flags, passed to the merge


def _name_value(flag: str) -> tuple[str, str]:
    name, _, value = flag.partition("=")
    return name, value


def merge_request(libfuzzer_args: list[str]) -> MergeRequest | None:
    """The merge these flags ask for (None when they ask for none); a refused flag raises."""
    mode = None
    flags: list[str] = []
    dirs: list[Path] = []
    for arg in libfuzzer_args:
        if not arg.startswith("-"):
            dirs.append(Path(arg))
            continue
        name, value = _name_value(arg)
        if name in REFUSED and value not in ("0", ""):
            raise RerunFlagRefused(f"libFuzzer flag {arg}: gdnfuzz does not re-run its harness this way; "
                                   f"{REFUSED[name]}")
        if name in MERGE_MODES and value not in ("0", ""):
            mode = f"{name}=1"
        else:
            flags.append(arg)
    if mode is None:
        return None
    if len(dirs) < 2:
        raise RerunFlagRefused(f"libFuzzer flag {mode}: give OUT_DIR and at least one INPUT_DIR after it")
    for d in dirs:
        if not d.is_dir():
            raise InputError(f"{mode}: {d}: no such directory")
    return MergeRequest(mode, dirs[0], dirs[1:], tuple(flags))


def merge_settings(candidate: str, reference: str, crashes: str | Path, fail_on: FailOn) -> RunSettings:
    """A merge's harness settings: findings stored raw in ``crashes``, never minimized or written as regressions."""
    return RunSettings(candidate=candidate, reference=reference, fail_on=fail_on, crashes=Path(crashes),
                       minimize_seconds=0.0, write_regressions=False)
