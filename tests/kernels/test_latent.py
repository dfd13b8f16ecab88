"""Latent attention (MLA) over a paged cache of latent rows split in K and V halves."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import ops, reference

PROPS = settings(max_examples=40, deadline=None)


def _case(paged_case, seed, q_lens, ctx_lens, heads, half, block_size):
    """A paged case whose caches are one head of ``half`` values: the latent's halves."""
    case = paged_case(seed, q_lens, ctx_lens, heads, 1, half, block_size)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(case.q.shape[0], heads, 2 * half, generator=g)
    return case, q


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    lens=st.lists(st.tuples(st.integers(1, 9), st.integers(0, 20)), min_size=1, max_size=4),
    heads=st.sampled_from([1, 3, 4]),
    half=st.sampled_from([4, 12, 36]),
    block_size=st.sampled_from([1, 4, 16]),
    rank_share=st.sampled_from([0.5, 0.75]),
)
def test_latent_prefill_matches_reference(
    paged_case, seed, lens, heads, half, block_size, rank_share
):
    q_lens, ctx = [n for n, _ in lens], [c for _, c in lens]
    case, q = _case(paged_case, seed, q_lens, ctx, heads, half, block_size)
    rank = int(2 * half * rank_share)
    args = (q, case.k_cache, case.v_cache, case.cu_seqlens_q, case.seq_lens, case.block_tables)
    got = ops.latent_prefill(*args, 0.3, rank)
    assert got.shape == (q.shape[0], heads, rank)
    torch.testing.assert_close(
        got, reference.latent_attention(*args, 0.3, rank), atol=1e-5, rtol=1e-5
    )


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    seq_lens=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    heads=st.sampled_from([1, 4]),
    half=st.sampled_from([4, 36]),
    block_size=st.sampled_from([1, 16]),
)
def test_latent_decode_matches_reference(paged_case, seed, seq_lens, heads, half, block_size):
    case, q = _case(
        paged_case, seed, [1] * len(seq_lens), [n - 1 for n in seq_lens], heads, half, block_size
    )
    rank = half + 2
    caches = (case.k_cache, case.v_cache)
    got = ops.latent_decode(q, *caches, case.seq_lens, case.block_tables, 0.2, rank)
    want = reference.latent_attention(
        q, *caches, case.cu_seqlens_q, case.seq_lens, case.block_tables, 0.2, rank
    )
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_latent_calls_are_checked(paged_case):
    case, q = _case(paged_case, 1, [2], [3], 2, 4, 4)
    tables = (case.seq_lens, case.block_tables)
    with pytest.raises(ValueError, match=r"q.shape\[2\] must equal the latent row"):
        ops.latent_decode(q[:1, :, :6], case.k_cache, case.v_cache, *tables, 0.1, 4)
    with pytest.raises(ValueError, match=r"rank must be in \[1, 7\), got 8"):
        ops.latent_prefill(q, case.k_cache, case.v_cache, case.cu_seqlens_q, *tables, 0.1, 8)


def test_opcheck_latent(paged_case):
    case, q = _case(paged_case, 2, [3, 1], [2, 5], 2, 4, 4)
    caches = (case.k_cache, case.v_cache)
    torch.library.opcheck(
        torch.ops.tandem.torch_latent_prefill.default,
        (q, *caches, case.cu_seqlens_q, case.seq_lens, case.block_tables, 0.5, 6),
    )
    dec, qd = _case(paged_case, 3, [1, 1], [2, 5], 2, 4, 4)
    torch.library.opcheck(
        torch.ops.tandem.torch_latent_decode.default,
        (qd, dec.k_cache, dec.v_cache, dec.seq_lens, dec.block_tables, 0.5, 6),
    )
