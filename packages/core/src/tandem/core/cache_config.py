"""``CacheConfig``: the paged KV cache's size, resolved once the engine knows a block's
bytes and the memory left after the weights (:mod:`tandem.core.kv_budget`).

A sequence of ``max_model_len`` tokens must fit in the cache: all its blocks, or with a
sliding window on every layer the blocks of its window and one step's new tokens (the
KV managers free the rest as it goes: :mod:`tandem.core.kv_window`). Where
``max_model_len`` was not given, it shrinks to the longest context that fits instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem.core.kv_budget import (
    DEFAULT_KV_CACHE_MEMORY_FRACTION,
    KNOBS,
    kv_budget_bytes,
    longest_context,
)
from tandem.core.kv_window import peak_blocks
from tandem.core.validate import check_int


@dataclass(slots=True)
class CacheConfig:
    block_size: int
    num_kv_blocks: int | None  # None until resolve_num_blocks() runs
    # None: kv_cache_memory_fraction of the memory left after the weights, capped at
    # max_num_seqs full sequences
    kv_cache_memory_bytes: int | None
    max_num_seqs: int
    max_model_len: int
    enable_prefix_caching: bool
    # the window bounding every layer's reach (None: a layer sees its whole sequence);
    # set, the KV managers free the blocks behind it (:mod:`tandem.core.kv_window`)
    sliding_window: int | None = None
    step_tokens: int | None = None  # the most tokens of one sequence a step computes
    kv_cache_memory_fraction: float = DEFAULT_KV_CACHE_MEMORY_FRACTION
    # False: max_model_len is the model's own and may shrink to what the cache holds
    max_model_len_given: bool = True
    kv_source: str = ""  # what sized the cache (for messages), set by resolve_num_blocks

    @property
    def blocks_per_seq(self) -> int:
        """Blocks one sequence of max_model_len tokens holds at most: all of them, or
        with a sliding window those of the window and one step's new tokens."""
        return self.blocks_for(self.max_model_len)

    def blocks_for(self, tokens: int) -> int:
        """Blocks one sequence holds at most where the context is ``tokens`` long."""
        full = math.ceil(tokens / self.block_size)
        if self.sliding_window is None:
            return full
        step = min(self.step_tokens or tokens, tokens)
        return min(full, peak_blocks(self.sliding_window, step, self.block_size))

    @property
    def needs_memory(self) -> bool:
        """Whether resolving takes the memory left after the weights (no count or bytes
        given)."""
        return self.num_kv_blocks is None and self.kv_cache_memory_bytes is None

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

    def resolve_num_blocks(self, bytes_per_block: int, available: int | None = None) -> int:
        """Fix ``num_kv_blocks`` (unless set explicitly) and, where it was not given and
        the model's whole context does not fit, shorten ``max_model_len``; return it.

        ``available``: the bytes this process's cache may take a fraction of (the memory
        left after the weights, already divided among the processes that share it);
        needed only where neither ``num_kv_blocks`` nor ``kv_cache_memory_bytes`` is set.
        """
        check_int("bytes_per_block", bytes_per_block, lo=1)
        if self.num_kv_blocks is not None:
            blocks, source = self.num_kv_blocks, f"num_kv_blocks={self.num_kv_blocks}"
        else:
            budget = self.kv_cache_memory_bytes
            if budget is not None:
                source = f"kv_cache_memory_bytes={budget}"
            else:
                if available is None:
                    raise ValueError(
                        "available must be given (bytes of memory left after the weights) "
                        "when neither num_kv_blocks nor kv_cache_memory_bytes is set"
                    )
                share = kv_budget_bytes(available, self.kv_cache_memory_fraction)
                full = self.max_num_seqs * self.blocks_per_seq * bytes_per_block
                budget = min(share, full)
                source = (
                    f"kv_cache_memory_fraction={self.kv_cache_memory_fraction:g} of "
                    f"{available} bytes available after the weights"
                )
            blocks = budget // bytes_per_block
        self.kv_source = source
        if blocks < self.blocks_per_seq and not self.max_model_len_given:
            fits = longest_context(blocks, self.max_model_len, self.block_size, self.blocks_for)
            if fits > 0:
                self.max_model_len = fits
                self.step_tokens = min(self.step_tokens or fits, fits)
        if blocks < self.blocks_per_seq:
            raise ValueError(
                f"the KV cache holds {blocks} blocks of {self.block_size} tokens "
                f"({source}, {bytes_per_block} bytes per block), but one sequence of "
                f"max_model_len={self.max_model_len} needs {self.blocks_per_seq}; "
                f"{KNOBS}, or num_kv_blocks"
            )
        self.num_kv_blocks = blocks
        return blocks
