"""Decode attention over more sequences than one bucket: sorted buckets, reused buffers."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import ops, reference
from tandem.kernels.ops.paged_decode import DECODE_BUCKET


def _decode(case, fn):
    return fn(*case.decode_args())


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    seq_lens=st.lists(
        st.integers(1, 48), min_size=DECODE_BUCKET + 1, max_size=3 * DECODE_BUCKET + 3
    ),
    heads=st.sampled_from([(4, 4), (4, 2), (4, 1)]),
    block_size=st.sampled_from([1, 4, 16]),
)
def test_bucketed_decode_matches_reference(paged_case, seed, seq_lens, heads, block_size):
    case = paged_case(seed, [1] * len(seq_lens), [s - 1 for s in seq_lens], *heads, 8, block_size)
    got = _decode(case, ops.decode_attention)
    want = _decode(case, reference.decode_attention)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_reused_buffers_do_not_leak_between_calls(paged_case):
    """A large gather, then a small one, then a large one again: each matches the reference."""
    sizes = [
        [40] * (2 * DECODE_BUCKET + 1),
        [3, 2],
        list(range(5, 5 + 2 * DECODE_BUCKET + 3)),
    ]
    for i, lens in enumerate(sizes):
        case = paged_case(i, [1] * len(lens), [s - 1 for s in lens], 4, 2, 8, 4)
        torch.testing.assert_close(
            _decode(case, ops.decode_attention),
            _decode(case, reference.decode_attention),
            atol=1e-5,
            rtol=1e-5,
        )


def test_bucketed_decode_keeps_row_order(paged_case):
    """Rows come back in input order although buckets sort sequences by length."""
    lens = list(range(30, 30 - 2 * DECODE_BUCKET - 2, -1))  # descending: sorting reverses
    case = paged_case(7, [1] * len(lens), [s - 1 for s in lens], 4, 4, 8, 2)
    out = _decode(case, ops.decode_attention)
    for b in (0, len(lens) - 1):
        one = ops.decode_attention(
            case.q[b : b + 1],
            case.k_cache,
            case.v_cache,
            case.seq_lens[b : b + 1],
            case.block_tables[b : b + 1],
            case.scale,
        )
        torch.testing.assert_close(out[b : b + 1], one, atol=1e-6, rtol=1e-6)


def test_plan_is_not_reused_after_in_place_changes(paged_case):
    """Layers of a step share a plan; metadata changed in place gets a fresh one."""
    lens = list(range(3, 3 + 2 * DECODE_BUCKET + 1))
    case = paged_case(11, [1] * len(lens), [s - 1 for s in lens], 4, 2, 8, 4)
    first = _decode(case, ops.decode_attention)
    torch.testing.assert_close(first, _decode(case, reference.decode_attention))
    case.seq_lens.sub_(1)  # same tensor object, shorter sequences
    torch.testing.assert_close(
        _decode(case, ops.decode_attention), _decode(case, reference.decode_attention)
    )
    case.block_tables[[0, 1]] = case.block_tables[[1, 0]]  # swap two rows' blocks
    case.seq_lens[[0, 1]] = case.seq_lens[[1, 0]]
    torch.testing.assert_close(
        _decode(case, ops.decode_attention), _decode(case, reference.decode_attention)
    )
