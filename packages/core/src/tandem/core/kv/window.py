"""Which KV blocks a sliding window still needs: the arithmetic both engines' KV managers use.

When every layer of a model slides over at most ``window`` keys, a query at position
``p`` reads keys ``p - window + 1 .. p`` only. A sequence whose next query sits at
``next_pos`` (its computed tokens) never reads a position before ``next_pos - window + 1``
again, so its blocks that end before that position can be handed back to the cache.
Their entries in the block table then point at the *null block*: one block past the
usable ones, allocated with the cache, zeroed and never written, so every gather through
a table stays inside the cache and reads finite values (the kernels skip or mask those
positions: the C kernels and the torch prefill start at the window, the torch decode
masks every slot before it).

A model whose layers mix the two (Gemma 2 and 3 alternate local and global layers) keeps
two pools of blocks, one per kind of layer (:func:`local_layers`): the global layers'
tables keep every block, the local layers' tables free theirs behind the window.
"""

from __future__ import annotations

from collections.abc import Sequence


def kv_window(windows: Sequence[int | None]) -> int | None:
    """The window bounding every layer's reach, or None where a layer sees everything."""
    if not windows or any(w is None or w <= 0 for w in windows):
        return None
    return max(w for w in windows if w is not None)


def local_layers(windows: Sequence[int | None]) -> tuple[tuple[int, ...], int | None]:
    """Where some layers slide and others see everything: (the sliding layers' indices,
    the widest of their windows); else ((), None)."""
    local = tuple(i for i, w in enumerate(windows) if w is not None and w > 0)
    if not local or len(local) == len(windows):
        return (), None
    return local, max(windows[i] or 0 for i in local)


def blocks_behind(next_pos: int, window: int, block_size: int) -> int:
    """Leading blocks no query at ``next_pos`` or later reads: block ``j`` (positions
    ``j * block_size .. (j + 1) * block_size - 1``) with
    ``(j + 1) * block_size <= next_pos - window + 1``."""
    return max(0, next_pos - window + 1) // block_size


def peak_blocks(window: int, step_tokens: int, block_size: int) -> int:
    """The most blocks one sequence holds while a step computes up to ``step_tokens`` of
    its tokens: the positions from the first query's window to the last new token
    (``window - 1 + step_tokens`` of them), over block borders anywhere."""
    span = window - 1 + step_tokens
    return -(-(span - 1) // block_size) + 1
