"""Prefill and decode attention against the reference, over random paged layouts."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from tandem.kernels import ops, reference
from tandem.kernels.ops.attention import decode_impl, prefill_impl

HEADS = st.sampled_from([(4, 4), (4, 2), (6, 2), (4, 1), (8, 1)])  # MHA, GQA, MQA
PROPS = settings(max_examples=30, deadline=None)


def _prefill(case, fn):
    return fn(*case.prefill_args())


def _decode(case, fn):
    return fn(*case.decode_args())


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    lens=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 12)), min_size=1, max_size=4),
    heads=HEADS,
    head_size=st.sampled_from([8, 16]),
    block_size=st.sampled_from([1, 2, 4, 16]),
)
def test_prefill_matches_reference(paged_case, seed, lens, heads, head_size, block_size):
    q_lens, ctx_lens = [n for n, _ in lens], [c for _, c in lens]
    case = paged_case(seed, q_lens, ctx_lens, *heads, head_size, block_size)
    got = _prefill(case, ops.prefill_attention)
    want = _prefill(case, reference.prefill_attention)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    seq_lens=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    heads=HEADS,
    head_size=st.sampled_from([8, 16]),
    block_size=st.sampled_from([1, 4, 8, 16]),
)
def test_decode_matches_reference(paged_case, seed, seq_lens, heads, head_size, block_size):
    case = paged_case(
        seed, [1] * len(seq_lens), [s - 1 for s in seq_lens], *heads, head_size, block_size
    )
    got = _decode(case, ops.decode_attention)
    want = _decode(case, reference.decode_attention)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_prefill_without_context_reads_new_kv_not_cache(paged_case):
    case = paged_case(3, [5, 4], [0, 6], 4, 2, 8, 4)
    want = _prefill(case, reference.prefill_attention)
    # spoil the first sequence's cached copy: a no-context sequence must not read it
    first = case.slot_mapping[:5]
    case.k_cache.view(-1, 2, 8)[first] = 1e3
    got = _prefill(case, ops.prefill_attention)
    torch.testing.assert_close(got[:5], want[:5], atol=1e-5, rtol=1e-5)
    spoiled = _prefill(case, reference.prefill_attention)  # the reference reads the cache
    assert not torch.allclose(spoiled[:5], want[:5])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_close_to_reference(paged_case, dtype):
    case = paged_case(5, [3, 1, 6], [4, 0, 9], 8, 2, 16, 4, dtype=dtype)
    torch.testing.assert_close(
        _prefill(case, ops.prefill_attention),
        _prefill(case, reference.prefill_attention),
        atol=2e-2,
        rtol=2e-2,
    )
    dec = paged_case(6, [1, 1], [7, 12], 8, 2, 16, 4, dtype=dtype)
    torch.testing.assert_close(
        _decode(dec, ops.decode_attention),
        _decode(dec, reference.decode_attention),
        atol=2e-2,
        rtol=2e-2,
    )


def test_decode_with_empty_batch(paged_case):
    case = paged_case(0, [1], [3], 4, 2, 8, 4)
    out = ops.decode_attention(
        case.q[:0], case.k_cache, case.v_cache, case.seq_lens[:0], case.block_tables[:0], case.scale
    )
    assert out.shape == (0, 4, 8)


class _CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("batch", [1, 7])
def test_decode_work_does_not_grow_with_batch(paged_case, batch):
    """Batched decode: the number of torch calls is the same for 1 and 7 sequences."""
    counts: list[int] = []
    for b in (1, batch):
        case = paged_case(b, [1] * b, [5 + i for i in range(b)], 4, 2, 8, 4)
        with _CountOps() as counter:
            decode_impl(
                case.q, case.k_cache, case.v_cache, case.seq_lens, case.block_tables, case.scale
            )
        counts.append(counter.calls)
    assert counts[0] == counts[1]


def test_prefill_counter_sees_per_sequence_work(paged_case):
    """The counter works: prefill loops over sequences, so its call count does grow."""
    counts: list[int] = []
    for b in (1, 3):
        case = paged_case(b, [2] * b, [3] * b, 4, 2, 8, 4)
        with _CountOps() as counter:
            prefill_impl(
                case.q,
                case.k,
                case.v,
                case.k_cache,
                case.v_cache,
                case.cu_seqlens_q,
                case.seq_lens,
                case.block_tables,
                case.scale,
            )
        counts.append(counter.calls)
    assert counts[1] > counts[0] > 0
