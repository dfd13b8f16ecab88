from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.v0.block_manager import BlockManager, blocks_for
from tandem.v0.sequence import Sequence


def make_seq(seq_id: int, prompt_len: int, max_tokens: int = 8) -> Sequence:
    return Sequence(seq_id, f"r{seq_id}", 0, list(range(1, prompt_len + 1)), max_tokens, 0)


def test_blocks_for() -> None:
    assert [blocks_for(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_allocate_grows_table_and_counts() -> None:
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = make_seq(0, 5)
    assert bm.blocks_needed(seq, 5) == 2
    bm.allocate(seq, 5)
    assert len(seq.block_table) == 2 and bm.num_free_blocks == 2 and bm.num_used_blocks == 2
    seq.num_computed_tokens = 5
    assert bm.blocks_needed(seq, 3) == 0  # slots 5..7 are in block 2
    assert bm.blocks_needed(seq, 4) == 1
    bm.free(seq)
    assert seq.block_table == [] and bm.num_free_blocks == 4
    bm.check()


def test_append_slot_only_at_block_boundary() -> None:
    bm = BlockManager(num_blocks=2, block_size=2)
    seq = make_seq(0, 2)
    bm.allocate(seq, 2)
    seq.num_computed_tokens = 2
    assert bm.can_append_slot(seq)
    bm.append_slot(seq)
    assert len(seq.block_table) == 2
    seq.num_computed_tokens = 3
    bm.append_slot(seq)  # slot 3 still in block 2
    assert bm.num_free_blocks == 0
    seq.num_computed_tokens = 4
    assert not bm.can_append_slot(seq)
    with pytest.raises(RuntimeError, match="out of KV blocks"):
        bm.append_slot(seq)


@pytest.mark.parametrize(("blocks", "size"), [(0, 4), (4, 0), (-1, 4), (2.0, 4)])
def test_bad_sizes(blocks: object, size: object) -> None:
    with pytest.raises(ValueError, match="must be an int >= 1"):
        BlockManager(blocks, size)  # type: ignore[arg-type]


def test_free_of_foreign_block_is_detected() -> None:
    bm = BlockManager(num_blocks=2, block_size=2)
    a, b = make_seq(0, 2), make_seq(1, 2)
    bm.allocate(a, 2)
    b.block_table = list(a.block_table)
    with pytest.raises(RuntimeError, match="not owned"):
        bm.free(b)


@settings(max_examples=60, deadline=None)
@given(
    num_blocks=st.integers(1, 12),
    block_size=st.integers(1, 5),
    ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 7)), max_size=40),
)
def test_blocks_are_conserved(num_blocks: int, block_size: int, ops: list) -> None:
    bm = BlockManager(num_blocks, block_size)
    seqs = [make_seq(i, 1) for i in range(4)]
    for who, n in ops:
        seq = seqs[who]
        if n == 0:
            bm.free(seq)
            seq.num_computed_tokens = 0
        elif bm.can_allocate(seq, n):
            bm.allocate(seq, n)
            seq.num_computed_tokens += n
            assert len(seq.block_table) == blocks_for(seq.num_computed_tokens, block_size)
        else:
            assert bm.blocks_needed(seq, n) > bm.num_free_blocks
        bm.check()
        owned = [b for s in seqs for b in s.block_table]
        assert len(owned) == len(set(owned)) == bm.num_used_blocks


def test_blocks_behind_the_window_go_back_and_point_at_null() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, window=6)
    seq = make_seq(0, 30)
    bm.allocate(seq, 12)
    seq.num_computed_tokens = 12  # the next query (12) reads 7..12: block 0 is behind
    assert bm.free_behind_window(seq) == 1
    assert seq.block_table[0] == bm.null_block == 8 and bm.num_used_blocks == 2
    assert bm.free_behind_window(seq) == 0  # nothing new behind
    bm.allocate(seq, 1)
    seq.num_computed_tokens = 13  # 13 reads 8..13: block 1 (4..7) is behind too
    assert bm.free_behind_window(seq) == 1 and seq.block_table[:2] == [8, 8]
    bm.check()
    bm.free(seq)
    assert bm.num_free_blocks == 8 and seq.block_table == []
    bm.check()


def test_peak_blocks_with_and_without_a_window() -> None:
    assert BlockManager(8, 4).peak_blocks(100, 8) == 25
    # a window of 6 and 8 new tokens: positions p - 5 .. p + 7 span at most 4 blocks
    assert BlockManager(8, 4, window=6).peak_blocks(100, 8) == 4
    assert BlockManager(8, 4, window=6).peak_blocks(5, 8) == 2  # never past the whole


@pytest.mark.parametrize("window", [0, -2, 1.5])
def test_bad_window(window: object) -> None:
    with pytest.raises(ValueError, match="window must be an int >= 1 or None"):
        BlockManager(4, 4, window)  # type: ignore[arg-type]
