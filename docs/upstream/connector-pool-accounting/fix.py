"""The proposed fix of the pool accounting, as a replacement of vLLM's
``MambaManager.get_num_blocks_to_allocate``: the align-mode cap counts the second block an external load
takes when the chunk crosses into a new block column.

The patch (``vllm/v1/core/single_type_kv_cache_manager.py``, in ``MambaManager.get_num_blocks_to_allocate``)::

                     physical_block_cap = 1 + int(has_partial_hit) + checkpoint_block
    +                # A synchronous external load takes the loaded state's block in
    +                # allocate_external_computed_blocks; a chunk that then ends in a later
    +                # block column takes another one in allocate_new_blocks.
    +                if total_computed_tokens > num_local_computed_tokens and cdiv(
    +                    num_tokens, self.block_size
    +                ) > cdiv(total_computed_tokens, self.block_size):
    +                    physical_block_cap += 1

Built from the installed source with those lines added (compiled against the module's own globals; nothing
is patched until ``apply_fix.py`` puts it on the class for a pytest session).
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

# at the indentation of the method's body once dedented
BEFORE = "            physical_block_cap = 1 + int(has_partial_hit) + checkpoint_block\n"
AFTER = BEFORE + (
    "            if total_computed_tokens > num_local_computed_tokens and cdiv(\n"
    "                num_tokens, self.block_size\n"
    "            ) > cdiv(total_computed_tokens, self.block_size):\n"
    "                physical_block_cap += 1\n"
)


def _fixed() -> Any:
    import vllm.v1.core.single_type_kv_cache_manager as managers

    method = managers.MambaManager.__dict__["get_num_blocks_to_allocate"]
    source = textwrap.dedent(inspect.getsource(method))
    if source.count(BEFORE) != 1:
        raise ValueError("the installed MambaManager no longer has the one line this fix extends")
    namespace = dict(vars(managers))
    exec(compile(source.replace(BEFORE, AFTER), "<connector-pool-accounting fix>", "exec"), namespace)
    return namespace["get_num_blocks_to_allocate"]


get_num_blocks_to_allocate = _fixed()
