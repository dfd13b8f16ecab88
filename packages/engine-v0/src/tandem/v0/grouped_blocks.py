"""KV blocks of a model whose layers mix a sliding window and the whole sequence.

Gemma 2 and 3 alternate local layers (a query sees its last ``window`` keys) with global
ones (it sees every key). Each kind of layer has its own pool of blocks and each
sequence a table per pool: ``seq.block_table`` for the global layers, which keep every
block, and ``seq.local_table`` for the local ones, whose blocks behind the window go
back after each step (:mod:`tandem.core.kv.window`), so a long sequence costs what its
global layers need. A step is scheduled only where both pools have room.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.v0.block_manager import BlockManager
from tandem.v0.sequence import Sequence

if TYPE_CHECKING:
    from tandem.core.config.cache import CacheConfig


def block_manager(cache: CacheConfig) -> BlockManager | GroupedBlockManager:
    """The KV block manager of a resolved cache: one pool, or the global and local
    layers' pools where the model mixes windows."""
    blocks, size = cache.num_blocks_resolved, cache.block_size
    if not cache.grouped:
        return BlockManager(blocks, size, cache.sliding_window)
    local = BlockManager(cache.num_local_blocks or 0, size, cache.local_window, "local_table")
    return GroupedBlockManager(BlockManager(blocks, size), local)


class GroupedBlockManager:
    """The global layers' :class:`BlockManager` and the local layers' one, driven as one
    (the counts are their sums)."""

    def __init__(self, full: BlockManager, local: BlockManager) -> None:
        if full.window is not None or local.window is None:
            raise ValueError("GroupedBlockManager needs a full pool and a windowed one")
        if full.block_size != local.block_size:
            raise ValueError(
                f"both pools must have one block size, got {full.block_size} and {local.block_size}"
            )
        if local.table_attr != "local_table":
            raise ValueError("the windowed pool must keep seq.local_table")
        self.full = full
        self.local = local
        self.block_size = full.block_size

    @property
    def window(self) -> int | None:
        return self.local.window

    @property
    def num_blocks(self) -> int:
        return self.full.num_blocks + self.local.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.full.num_free_blocks + self.local.num_free_blocks

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks

    def demand(self, total_tokens: int, step_tokens: int) -> tuple[int, int]:
        """(blocks, blocks of the pool) for the pool a sequence of ``total_tokens`` fills
        the most, steps of at most ``step_tokens``."""
        pairs = [bm.demand(total_tokens, step_tokens) for bm in (self.full, self.local)]
        return max(pairs, key=lambda p: p[0] / p[1])

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.full.can_allocate(seq, num_new_tokens) and self.local.can_allocate(
            seq, num_new_tokens
        )

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        if not self.can_allocate(seq, num_new_tokens):
            raise RuntimeError(
                f"out of KV blocks: sequence {seq.seq_id} needs "
                f"{self.full.blocks_needed(seq, num_new_tokens)} of {self.full.num_free_blocks} "
                f"free (global layers) and {self.local.blocks_needed(seq, num_new_tokens)} of "
                f"{self.local.num_free_blocks} (local layers); call can_allocate first"
            )
        self.full.allocate(seq, num_new_tokens)
        self.local.allocate(seq, num_new_tokens)

    def can_append_slot(self, seq: Sequence) -> bool:
        return self.can_allocate(seq, 1)

    def append_slot(self, seq: Sequence) -> None:
        self.allocate(seq, 1)

    def free(self, seq: Sequence) -> None:
        self.full.free(seq)
        self.local.free(seq)

    def trim(self, seq: Sequence, num_tokens: int) -> int:
        return self.full.trim(seq, num_tokens) + self.local.trim(seq, num_tokens)

    def free_behind_window(self, seq: Sequence) -> int:
        return self.local.free_behind_window(seq)

    def check(self) -> None:
        self.full.check()
        self.local.check()
