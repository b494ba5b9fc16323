"""One-line mutants of vLLM's ``MambaManager``, as whole-branch (``branch:DIR``) candidates.

Each mutant changes exactly one line of ``vllm/v1/core/single_type_kv_cache_manager.py`` of the
installed vLLM (0.32.0) inside ``class MambaManager``; :func:`materialize` writes a checkout holding
what whole-branch mode brings (``fuzz.model.checkout.OVERLAID_PACKAGES`` and ``OVERLAID_FILES``, copied
from the installed vLLM) with that one edit, and the candidate is ``branch:DIR``.

What each mutant breaks (``MUTANTS``: name -> (old line, new line)):

- ``hit_units_short`` (``find_longest_cache_hit``, hash-unit path): the search for a partial hit starts
  one hash unit short of ``max_length``, so the longest partial hit is never found: lost cache hits.
- ``hit_blocks_short`` (``find_longest_cache_hit``, whole-block path): the search starts one block short,
  so a hit on the last reachable block is missed: lost cache hits.
- ``hit_length_one_block_short`` (``find_longest_cache_hit``): a whole-block hit claims one block fewer
  tokens than its state holds, so the request resumes at a position whose state is a block further on.
- ``retire_state_early`` (``remove_skipped_blocks``): ``<`` becomes ``<=``, so the previous step's state
  block is freed a step early, while it is still the source of this step's state copy.
- ``skip_last_state`` (``get_num_skipped_tokens``): the state of the last computed token counts as
  skipped, so the block holding the running state can be freed.
- ``same_step_guard_first_block`` (``get_num_blocks_to_allocate``): the guard against reusing a block
  cached in this very step looks at the first computed block (a null pad for most hits) instead of the
  last, so a request can resume from a state that is not written yet.
- ``step_cache_never_cleared`` (``new_step_starts``): the blocks cached in a step are never forgotten, so
  every later hit on them is deferred as if it were same-step: lost cache hits, later first tokens.
- ``partial_tail_block_aligned`` (``_cache_partial_tail_block``): a prompt's partial tail is only cached
  at whole Mamba blocks, not at hash units: lost partial cache hits.
- ``last_state_index_off_by_one`` (``allocate_new_blocks``): a running request's previous state block
  is recorded one block too low, so the block that should be freed is not (and an older one is).
- ``null_gap_over_checkpoint`` (``allocate_new_blocks``): the null gap also covers the internal
  checkpoint's block, so the checkpoint slot is a null block.

Screened and dropped (no profile found them in 30 scenarios each; likely equivalent under the generator):
``over_allocated_strict`` (``num_required_blocks <= len(req_blocks)`` -> ``<``) and
``checkpoint_strict_prefill_end`` (``query_end >= prefill_end`` -> ``>``). Not screened for lack of time,
and so left out: mutants of ``physical_block_cap``, ``is_retained_checkpoint``, ``reachable_block_mask``'s
boundary test and the junction bound of ``_cache_partial_tail_block`` (the notes list them).

``DEEP`` and ``SHALLOW`` name the mutants the workload profiles tell apart (the screen in
``/work/notes/37-manager.md``): a deep one the ``default`` profile's random scenarios find in (nearly)
none of N while ``chat``/``agentic``/``batch`` find it; a shallow one ``default`` finds often.

    python bench/mutants/manager.py NAME DEST     # prints branch:DEST
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

MANAGER_FILE = "vllm/v1/core/single_type_kv_cache_manager.py"

MUTANTS: dict[str, tuple[str, str]] = {
    "hit_units_short": (
        "                max_length // hash_block_size, len(block_hashes)",
        "                max_length // hash_block_size - 1, len(block_hashes)"),
    "hit_blocks_short": (
        "        max_num_blocks = max_length // block_size",
        "        max_num_blocks = max_length // block_size - 1"),
    "hit_length_one_block_short": (
        "                hit_length = (i + 1) * block_size",
        "                hit_length = i * block_size"),
    "retire_state_early": (
        "                < cdiv(processed_computed_tokens, self.block_size) - 1",
        "                <= cdiv(processed_computed_tokens, self.block_size) - 1"),
    "skip_last_state": (
        "        return num_computed_tokens - 1",
        "        return num_computed_tokens"),
    "same_step_guard_first_block": (
        "            and new_computed_blocks[-1].block_hash in self.cached_blocks_this_step",
        "            and new_computed_blocks[0].block_hash in self.cached_blocks_this_step"),
    "step_cache_never_cleared": (
        "        self.cached_blocks_this_step.clear()",
        "        pass"),
    "partial_tail_block_aligned": (
        "        if num_tokens <= 0 or num_tokens % hash_block_size != 0:",
        "        if num_tokens <= 0 or num_tokens % self.block_size != 0:"),
    "last_state_index_off_by_one": (
        "                        prev_block_len - 1 - self.num_speculative_blocks",
        "                        prev_block_len - 2 - self.num_speculative_blocks"),
    "null_gap_over_checkpoint": (
        "                    null_end = num_skipped_blocks - checkpoint_block",
        "                    null_end = num_skipped_blocks"),
}

# A first screen (30 random scenarios per profile, a loaded machine) found these by no ``prefill`` scenario and
# by 1 of 30 ``chat``/``agentic`` ones; fuzzing does not bear that out: a flagless 90 s ``gdnfuzz run`` pinned to
# ``--profile prefill`` finds both on 5 of 5 seeds (medians 21.5 s and 41.3 s, ``bench/first_find.py``), as the
# mixture does (23.5 s, 50.5 s). Kept as the screen's least-found mutants, not as mutants only deep states reach.
DEEP: tuple[str, ...] = ("hit_length_one_block_short", "null_gap_over_checkpoint")
# Found by 12-23 of 30-50 ``default`` scenarios (and as often or more by every other profile).
SHALLOW: tuple[str, ...] = ("hit_units_short", "retire_state_early", "skip_last_state", "step_cache_never_cleared")


class MutantError(ValueError):
    """A mutant that cannot be applied to the installed vLLM (unknown, or its line not found exactly once)."""


def installed_root() -> Path:
    """The site-packages directory holding the installed ``vllm`` package."""
    from fuzz.model.checkout import installed_vllm_root

    return installed_vllm_root()


def mutate(text: str, name: str) -> str:
    """``text`` (the manager file) with mutant ``name``'s line replaced; :class:`MutantError` unless its old
    line occurs exactly once, as a whole line."""
    if name not in MUTANTS:
        raise MutantError(f"unknown mutant {name!r}; known: {', '.join(MUTANTS)}")
    old, new = MUTANTS[name]
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line == old]
    if len(hits) != 1 or text.count(old) != 1:
        raise MutantError(f"{name}: {old.strip()!r} occurs {text.count(old)} times in {MANAGER_FILE}, not once")
    lines[hits[0]] = new
    return "\n".join(lines)


def materialize(name: str, dest: Path | str) -> Path:
    """Write a whole-branch checkout of the installed vLLM with mutant ``name`` applied under ``dest``
    (which must not hold a previous one) and return ``dest`` (the candidate is ``branch:<dest>``)."""
    from fuzz.model.checkout import OVERLAID_FILES, OVERLAID_PACKAGES

    root, dest = installed_root(), Path(dest).resolve()
    mutated = mutate((root / MANAGER_FILE).read_text(), name)  # refuse before writing anything
    for package in OVERLAID_PACKAGES:
        shutil.copytree(root / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    for file in OVERLAID_FILES:
        (dest / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / file, dest / file)
    (dest / MANAGER_FILE).write_text(mutated)
    return dest


def main(argv: list[str] | None = None) -> int:
    """``manager.py NAME DEST``: materialize the mutant and print its ``branch:`` policy."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(f"usage: manager.py NAME DEST\nmutants: {', '.join(MUTANTS)}", file=sys.stderr)
        return 2
    try:
        print(f"branch:{materialize(args[0], args[1])}")
    except MutantError as exc:
        print(f"manager.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this tree's fuzz/
    raise SystemExit(main())
