"""Paged KV block manager: which cache blocks each sequence owns.

A sequence holding ``L`` tokens needs ``ceil(L / block_size)`` blocks; token ``j`` lives
in ``block_table[j // block_size]`` at offset ``j % block_size`` (the layout of
:mod:`tandem.kernels.reference`). Blocks are never shared in v0, so a free list is all
the bookkeeping there is.

With a sliding window on every layer (``window``), the blocks a sequence's window has
left behind are returned after each step (:mod:`tandem.core.kv.window`); their table
entries become :attr:`BlockManager.null_block` (one past the usable blocks), so a long
generation holds the blocks of its window only.
"""

from __future__ import annotations

from collections import deque

from tandem.core.kv.window import blocks_behind, peak_blocks
from tandem.v0.sequence import Sequence


def blocks_for(num_tokens: int, block_size: int) -> int:
    """How many blocks hold ``num_tokens`` tokens."""
    return -(-num_tokens // block_size)


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        window: int | None = None,
        table_attr: str = "block_table",
    ) -> None:
        if not isinstance(num_blocks, int) or num_blocks < 1:
            raise ValueError(f"num_blocks must be an int >= 1, got {num_blocks!r}")
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be an int >= 1 or None, got {window!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.window = window
        # the Sequence attribute holding this pool's table (the local layers' pool of a
        # model that mixes windows keeps ``local_table``: :mod:`tandem.v0.grouped_blocks`)
        self.table_attr = table_attr
        self.null_block = num_blocks  # what freed table entries point at; never handed out
        self._free: deque[int] = deque(range(num_blocks))
        self._owner: dict[int, int] = {}  # block -> seq_id

    # counts -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks

    # allocation ---------------------------------------------------------------------
    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Extra blocks ``seq`` needs to also hold its next ``num_new_tokens`` tokens."""
        if num_new_tokens < 0:
            raise ValueError(f"num_new_tokens must be >= 0, got {num_new_tokens}")
        total = seq.num_computed_tokens + num_new_tokens
        return max(0, blocks_for(total, self.block_size) - len(self._table(seq)))

    def peak_blocks(self, total_tokens: int, step_tokens: int) -> int:
        """The most blocks a sequence of ``total_tokens`` holds at once when a step
        computes at most ``step_tokens`` of its tokens."""
        full = blocks_for(total_tokens, self.block_size)
        if self.window is None:
            return full
        return min(full, peak_blocks(self.window, step_tokens, self.block_size))

    def demand(self, total_tokens: int, step_tokens: int) -> tuple[int, int]:
        """(the most blocks a sequence of ``total_tokens`` holds at once, the blocks of the
        pool), steps of at most ``step_tokens``."""
        return self.peak_blocks(total_tokens, step_tokens), self.num_blocks

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= len(self._free)

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        """Grow ``seq``'s table so that its next ``num_new_tokens`` tokens have slots."""
        need = self.blocks_needed(seq, num_new_tokens)
        if need > len(self._free):
            raise RuntimeError(
                f"out of KV blocks: sequence {seq.seq_id} needs {need}, "
                f"{len(self._free)} free (call can_allocate first)"
            )
        table = self._table(seq)
        for _ in range(need):
            block = self._free.popleft()
            self._owner[block] = seq.seq_id
            table.append(block)

    def can_append_slot(self, seq: Sequence) -> bool:
        """Whether the one token a decode step adds fits (a new block if the last is full)."""
        return self.can_allocate(seq, 1)

    def append_slot(self, seq: Sequence) -> None:
        self.allocate(seq, 1)

    def free(self, seq: Sequence) -> None:
        """Return every block of ``seq`` (finished, aborted or preempted)."""
        for block in self._table(seq):
            if block != self.null_block:
                self._give_back(seq, block)
        setattr(seq, self.table_attr, [])

    def trim(self, seq: Sequence, num_tokens: int) -> int:
        """Return the blocks past those holding ``num_tokens`` tokens (allocated for
        speculative drafts that were refused); returns how many."""
        keep = blocks_for(num_tokens, self.block_size)
        table = self._table(seq)
        extra = table[keep:]
        for block in extra:
            if block != self.null_block:
                self._give_back(seq, block)
        del table[keep:]
        return len(extra)

    def free_behind_window(self, seq: Sequence) -> int:
        """Return the blocks no query from ``seq``'s next token on reads (none without a
        window); returns how many. Called after each step."""
        table = self._table(seq)
        if self.window is None or not table:
            return 0
        behind = blocks_behind(seq.num_computed_tokens, self.window, self.block_size)
        j, freed = min(behind, len(table)) - 1, 0
        while j >= 0 and table[j] != self.null_block:  # the freed ones are a prefix
            self._give_back(seq, table[j])
            table[j] = self.null_block
            j, freed = j - 1, freed + 1
        return freed

    def _table(self, seq: Sequence) -> list[int]:
        table: list[int] = getattr(seq, self.table_attr)
        return table

    def _give_back(self, seq: Sequence, block: int) -> None:
        if self._owner.pop(block, None) != seq.seq_id:
            raise RuntimeError(f"block {block} is not owned by sequence {seq.seq_id}")
        self._free.append(block)

    def check(self) -> None:
        """Internal consistency: every block is either free or owned, exactly once."""
        free = set(self._free)
        if len(free) != len(self._free):
            raise AssertionError("a block appears twice in the free list")
        if free & self._owner.keys():
            raise AssertionError("a block is both free and owned")
        if len(free) + len(self._owner) != self.num_blocks:
            raise AssertionError("blocks leaked: free + owned != num_blocks")
