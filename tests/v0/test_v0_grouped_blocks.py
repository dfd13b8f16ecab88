"""Engine v0's KV blocks for a model that mixes local (sliding-window) and global layers:
two pools, a table per pool, the local one freed behind the window, both or neither
allocated."""

from __future__ import annotations

import pytest

from tandem.v0.block_manager import BlockManager
from tandem.v0.grouped_blocks import GroupedBlockManager
from tandem.v0.sequence import Sequence


def make_seq(seq_id: int, prompt_len: int) -> Sequence:
    return Sequence(seq_id, f"r{seq_id}", 0, list(range(1, prompt_len + 1)), 8, 0)


def grouped(full: int, local: int, window: int = 6) -> GroupedBlockManager:
    return GroupedBlockManager(BlockManager(full, 4), BlockManager(local, 4, window, "local_table"))


def test_the_local_pool_keeps_the_window_the_global_one_every_block() -> None:
    bm = grouped(16, 4)
    seq = make_seq(0, 40)
    for _ in range(10):  # 40 tokens in steps of 4
        bm.allocate(seq, 4)
        seq.num_computed_tokens += 4
        bm.free_behind_window(seq)
    assert seq.block_table == list(range(10))  # every block of the global layers
    # the query at 40 reads 35..40: blocks 0..7 of the local layers went back
    assert seq.local_table[:8] == [bm.local.null_block] * 8 == [4] * 8
    assert bm.local.num_used_blocks == 2 and bm.num_used_blocks == 12
    assert (bm.num_blocks, bm.num_free_blocks) == (20, 8)
    bm.check()
    bm.free(seq)
    assert seq.block_table == seq.local_table == [] and bm.num_free_blocks == 20
    bm.check()


def test_a_step_needs_room_in_both_pools() -> None:
    bm = grouped(16, 2)
    seq = make_seq(0, 40)
    assert bm.can_allocate(seq, 8) and not bm.can_allocate(seq, 12)  # 3 local blocks
    with pytest.raises(RuntimeError, match=r"out of KV blocks: .* \(local layers\)"):
        bm.allocate(seq, 12)
    assert seq.block_table == seq.local_table == [] and bm.num_free_blocks == 18
    bm.allocate(seq, 8)
    assert len(seq.block_table) == len(seq.local_table) == 2


def test_refused_drafts_give_back_both_tables_tails() -> None:
    bm = grouped(16, 8)
    seq = make_seq(0, 40)
    bm.allocate(seq, 12)
    assert bm.trim(seq, 5) == 2 * 1  # blocks 2 of each table held only for drafts
    assert len(seq.block_table) == len(seq.local_table) == 2
    bm.check()


def test_demand_names_the_tighter_pool() -> None:
    bm = grouped(32, 4)
    # 100 tokens in whole-prompt steps: 25 of 32 global blocks, 25 of 4 local ones
    assert bm.demand(100, 100) == (25, 4)
    # in steps of 4 the local layers hold 3 blocks at most: the global pool is tighter
    assert bm.demand(100, 4) == (25, 32)


def test_the_pools_must_match() -> None:
    with pytest.raises(ValueError, match="a full pool and a windowed one"):
        GroupedBlockManager(BlockManager(4, 4, 6), BlockManager(4, 4, 6, "local_table"))
    with pytest.raises(ValueError, match=r"must keep seq\.local_table"):
        GroupedBlockManager(BlockManager(4, 4), BlockManager(4, 4, 6))
