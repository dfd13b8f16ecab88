"""``CacheConfig``: the paged KV cache's size, resolved once the engine knows a block's
bytes and the memory left after the weights (:mod:`tandem.core.kv.budget`).

A sequence of ``max_model_len`` tokens must fit in the cache: all its blocks, or with a
sliding window on every layer the blocks of its window and one step's new tokens (the
KV managers free the rest as it goes: :mod:`tandem.core.kv.window`). Where some layers
slide and others do not (Gemma 2 and 3), each kind has a pool of its own: the global
layers' holds whole sequences (``num_kv_blocks``), the local layers' their windows
(``num_local_blocks``). Where ``max_model_len`` was not given, it shrinks to the longest
context that fits instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tandem.core.kv.budget import (
    DEFAULT_KV_CACHE_MEMORY_FRACTION,
    KNOBS,
    kv_budget_bytes,
    longest_context,
    split_pools,
)
from tandem.core.kv.window import peak_blocks
from tandem.core.validate import check_int


@dataclass(slots=True)
class CacheConfig:
    block_size: int
    # None until resolve_num_blocks() runs; with local_layers, the global layers' pool
    num_kv_blocks: int | None
    # None: kv_cache_memory_fraction of the memory left after the weights, capped at
    # max_num_seqs full sequences
    kv_cache_memory_bytes: int | None
    max_num_seqs: int
    max_model_len: int
    enable_prefix_caching: bool
    # the window bounding every layer's reach (None: a layer sees its whole sequence);
    # set, the KV managers free the blocks behind it (:mod:`tandem.core.kv.window`)
    sliding_window: int | None = None
    step_tokens: int | None = None  # the most tokens of one sequence a step computes
    kv_cache_memory_fraction: float = DEFAULT_KV_CACHE_MEMORY_FRACTION
    # the fraction's share at most this many bytes (None: no cap; the fraction was given)
    kv_cache_memory_cap: int | None = None
    # False: max_model_len is the model's own and may shrink to what the cache holds
    max_model_len_given: bool = True
    kv_source: str = ""  # what sized the cache (for messages), set by resolve_num_blocks
    # where some layers slide and others see everything: the sliding ones, their widest
    # window, every layer's count, and (resolved) the blocks of their own pool
    local_layers: tuple[int, ...] = ()
    local_window: int | None = None
    num_layers: int = 1
    num_local_blocks: int | None = None

    @property
    def grouped(self) -> bool:
        """Whether local and global layers keep pools of their own."""
        return self.local_window is not None

    @property
    def blocks_per_seq(self) -> int:
        """Blocks one sequence of max_model_len tokens holds at most (of the global
        layers' pool where the layers are grouped)."""
        return self.blocks_for(self.max_model_len)

    def blocks_for(self, tokens: int) -> int:
        """Blocks one sequence holds at most where the context is ``tokens`` long."""
        full = math.ceil(tokens / self.block_size)
        window = self.sliding_window
        return full if window is None else min(full, self._window_blocks(window, tokens))

    def local_blocks_for(self, tokens: int) -> int:
        """Blocks of the local layers' pool one sequence holds at most."""
        full = math.ceil(tokens / self.block_size)
        window = self.local_window
        return full if window is None else min(full, self._window_blocks(window, tokens))

    def layer_blocks_for(self, tokens: int) -> int:
        """One sequence's blocks counted per layer (a block of one layer each)."""
        if not self.grouped:
            return self.num_layers * self.blocks_for(tokens)
        local = len(self.local_layers)
        full = math.ceil(tokens / self.block_size)
        return (self.num_layers - local) * full + local * self.local_blocks_for(tokens)

    def _window_blocks(self, window: int, tokens: int) -> int:
        step = min(self.step_tokens or tokens, tokens)
        return peak_blocks(window, step, self.block_size)

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

    def layer_blocks(self) -> list[int]:
        """Blocks each layer's cache tensors hold: its pool's and, where blocks are freed
        behind a window, the null block."""
        if not self.grouped:
            return [self.allocated_blocks] * self.num_layers
        local = set(self.local_layers)
        if self.num_local_blocks is None:
            raise RuntimeError("num_local_blocks is not resolved yet: call resolve_num_blocks")
        return [
            self.num_local_blocks + 1 if i in local else self.num_blocks_resolved
            for i in range(self.num_layers)
        ]

    @property
    def num_blocks_resolved(self) -> int:
        if self.num_kv_blocks is None:
            raise RuntimeError("num_kv_blocks is not resolved yet: call resolve_num_blocks")
        return self.num_kv_blocks

    def kv_bytes(self, bytes_per_block: int) -> int:
        """Bytes of the usable blocks of every layer (``bytes_per_block``: a block of
        every layer)."""
        if not self.grouped:
            return self.num_blocks_resolved * bytes_per_block
        local = len(self.local_layers)
        blocks = (self.num_layers - local) * self.num_blocks_resolved
        blocks += local * (self.num_local_blocks or 0)
        return blocks * (bytes_per_block // self.num_layers)

    def bytes_per_token(self, bytes_per_block: int) -> int:
        """What each token of a sequence adds to the cache (where the layers are grouped,
        past the window: the global layers' share)."""
        per = bytes_per_block // self.block_size
        if not self.grouped:
            return per
        return per // self.num_layers * (self.num_layers - len(self.local_layers))

    def describe_blocks(self) -> str:
        """The pools' sizes in words."""
        text = f"{self.num_blocks_resolved} blocks of {self.block_size} tokens"
        if self.grouped:
            text += f" for the global layers and {self.num_local_blocks} for the local ones"
        return text

    def resolve_num_blocks(self, bytes_per_block: int, available: int | None = None) -> int:
        """Fix ``num_kv_blocks`` (unless set explicitly; with local layers, their pool's
        ``num_local_blocks`` too) and, where it was not given and the model's whole
        context does not fit, shorten ``max_model_len``; return ``num_kv_blocks``.

        ``available``: the bytes this process's cache may take a fraction of (the memory
        left after the weights, already divided among the processes that share it);
        needed only where neither ``num_kv_blocks`` nor ``kv_cache_memory_bytes`` is set.
        A count sizes the global layers' pool where the layers are grouped (the local
        one holds as many windows as it holds sequences); bytes are shared by both pools
        in proportion to what one sequence needs of each.
        """
        check_int("bytes_per_block", bytes_per_block, lo=1)
        if self.grouped and self.num_local_blocks is not None:
            return self.num_blocks_resolved  # resolved already
        have, need, unit, source, detail = self._budget(bytes_per_block, available)
        self.kv_source = source
        if need(self.max_model_len) > have and not self.max_model_len_given:
            fits = longest_context(have, self.max_model_len, self.block_size, need)
            if fits > 0:
                self.max_model_len = fits
                self.step_tokens = min(self.step_tokens or fits, fits)
        if need(self.max_model_len) > have:
            raise ValueError(
                f"the KV cache holds {have} {unit} ({source}{detail}), but one sequence of "
                f"max_model_len={self.max_model_len} needs {need(self.max_model_len)}; "
                f"{KNOBS}, or num_kv_blocks"
            )
        if not self.grouped:
            self.num_kv_blocks = have
            return have
        full = math.ceil(self.max_model_len / self.block_size)
        local = self.local_blocks_for(self.max_model_len)
        if self.num_kv_blocks is not None:  # a count: the global pool, and its windows
            self.num_local_blocks = -(-self.num_kv_blocks * local // full)
        else:
            layers = len(self.local_layers)
            self.num_kv_blocks, self.num_local_blocks = split_pools(
                have, full, local, self.num_layers - layers, layers
            )
        return self.num_kv_blocks

    def _budget(
        self, bytes_per_block: int, available: int | None
    ) -> tuple[int, Callable[[int], int], str, str, str]:
        """(what the cache holds, what one sequence of a context needs of it, the unit of
        both in words, what sized it, the unit's bytes in words)."""
        bs = self.block_size
        unit = f"blocks of {bs} tokens"
        if self.num_kv_blocks is not None:
            need = (lambda n: math.ceil(n / bs)) if self.grouped else self.blocks_for
            return self.num_kv_blocks, need, unit, f"num_kv_blocks={self.num_kv_blocks}", ""
        if self.grouped:  # bytes shared by two pools: counted in blocks of one layer
            per, need = bytes_per_block // self.num_layers, self.layer_blocks_for
            unit += " of one layer"
        else:
            per, need = bytes_per_block, self.blocks_for
        detail = f", {per} bytes per block"
        budget = self.kv_cache_memory_bytes
        if budget is not None:
            return budget // per, need, unit, f"kv_cache_memory_bytes={budget}", detail
        if available is None:
            raise ValueError(
                "available must be given (bytes of memory left after the weights) "
                "when neither num_kv_blocks nor kv_cache_memory_bytes is set"
            )
        share = kv_budget_bytes(available, self.kv_cache_memory_fraction)
        capped = self.kv_cache_memory_cap is not None and share > self.kv_cache_memory_cap
        if capped:
            share = self.kv_cache_memory_cap
        budget = min(share, self.max_num_seqs * need(self.max_model_len) * per)
        source = (
            f"kv_cache_memory_fraction={self.kv_cache_memory_fraction:g} of "
            f"{available} bytes available after the weights"
            + (f", at most {self.kv_cache_memory_cap} bytes by default" if capped else "")
        )
        return budget // per, need, unit, source, detail
