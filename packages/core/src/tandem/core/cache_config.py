"""``CacheConfig``: the paged KV cache's size, resolved once the engine knows a block's bytes.

A sequence of ``max_model_len`` tokens must fit in the cache: all its blocks, or with a
sliding window on every layer the blocks of its window and one step's new tokens (the
KV managers free the rest as it goes: :mod:`tandem.core.kv_window`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem.core.kv_window import peak_blocks
from tandem.core.validate import check_int

DEFAULT_KV_CACHE_BYTES = 1 << 30


@dataclass(slots=True)
class CacheConfig:
    block_size: int
    num_kv_blocks: int | None  # None until resolve_num_blocks() runs
    kv_cache_memory_bytes: int | None  # None: 1 GiB, capped at max_num_seqs full sequences
    max_num_seqs: int
    max_model_len: int
    enable_prefix_caching: bool
    # the window bounding every layer's reach (None: a layer sees its whole sequence);
    # set, the KV managers free the blocks behind it (:mod:`tandem.core.kv_window`)
    sliding_window: int | None = None
    step_tokens: int | None = None  # the most tokens of one sequence a step computes

    @property
    def blocks_per_seq(self) -> int:
        """Blocks one sequence of max_model_len tokens holds at most: all of them, or
        with a sliding window those of the window and one step's new tokens."""
        full = math.ceil(self.max_model_len / self.block_size)
        if self.sliding_window is None:
            return full
        step = self.step_tokens or self.max_model_len
        return min(full, peak_blocks(self.sliding_window, step, self.block_size))

    @property
    def null_block(self) -> int | None:
        """The block freed table entries point at (one past the usable ones), or None
        where no block is ever freed before its sequence ends."""
        return None if self.sliding_window is None else self.num_blocks_resolved

    @property
    def allocated_blocks(self) -> int:
        """Blocks the KV cache tensors hold: the usable ones and the null block."""
        return self.num_blocks_resolved + (self.null_block is not None)

    @property
    def num_blocks_resolved(self) -> int:
        if self.num_kv_blocks is None:
            raise RuntimeError("num_kv_blocks is not resolved yet: call resolve_num_blocks")
        return self.num_kv_blocks

    def resolve_num_blocks(self, bytes_per_block: int) -> int:
        """Fix ``num_kv_blocks`` from the byte budget (unless set explicitly); return it."""
        check_int("bytes_per_block", bytes_per_block, lo=1)
        if self.num_kv_blocks is not None:
            blocks, source = self.num_kv_blocks, f"num_kv_blocks={self.num_kv_blocks}"
        else:
            budget = self.kv_cache_memory_bytes
            if budget is None:
                full = self.max_num_seqs * self.blocks_per_seq * bytes_per_block
                budget = min(DEFAULT_KV_CACHE_BYTES, full)
            blocks = budget // bytes_per_block
            source = f"kv_cache_memory_bytes={budget} ({bytes_per_block} bytes per block)"
        if blocks < self.blocks_per_seq:
            raise ValueError(
                f"the KV cache holds {blocks} blocks of {self.block_size} tokens "
                f"({source}), but one sequence of max_model_len={self.max_model_len} needs "
                f"{self.blocks_per_seq}; raise num_kv_blocks or kv_cache_memory_bytes, "
                f"or lower max_model_len"
            )
        self.num_kv_blocks = blocks
        return blocks
