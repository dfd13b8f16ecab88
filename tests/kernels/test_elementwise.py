"""RMSNorm, rotary embedding, SiLU-and-mul and the K/V cache write against the reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import ops, reference

PROPS = settings(max_examples=25, deadline=None)
SEEDS = st.integers(0, 2**31 - 1)
DTYPES = st.sampled_from([torch.float32, torch.bfloat16])


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}


@PROPS
@given(
    seed=SEEDS,
    tokens=st.integers(1, 9),
    hidden=st.integers(1, 48),
    dtype=DTYPES,
    eps=st.sampled_from([1e-6, 1e-5, 0.1]),
)
def test_rms_norm(seed, tokens, hidden, dtype, eps):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn((tokens, hidden), generator=g) * 3).to(dtype)
    w = torch.randn(hidden, generator=g).to(dtype)
    got = ops.rms_norm(x, w, eps)
    assert got.dtype == dtype
    torch.testing.assert_close(got, reference.rms_norm(x, w, eps), **_tol(dtype))


@PROPS
@given(seed=SEEDS, tokens=st.integers(1, 9), hidden=st.integers(1, 48), dtype=DTYPES)
def test_fused_add_rms_norm(seed, tokens, hidden, dtype):
    g = torch.Generator().manual_seed(seed)
    x, r = (torch.randn((2, tokens, hidden), generator=g)).to(dtype)
    w = torch.randn(hidden, generator=g).to(dtype)
    out, summed = ops.fused_add_rms_norm(x, r, w, 1e-6)
    want_out, want_sum = reference.fused_add_rms_norm(x, r, w, 1e-6)
    torch.testing.assert_close(out, want_out, **_tol(dtype))
    torch.testing.assert_close(summed, want_sum, atol=0, rtol=0)


def test_rms_norm_accepts_leading_dims_and_leaves_input():
    x = torch.randn(2, 3, 8)
    before = x.clone()
    out = ops.rms_norm(x, torch.ones(8), 1e-6)
    assert out.shape == x.shape
    assert torch.equal(x, before)
    torch.testing.assert_close(out.pow(2).mean(-1), torch.ones(2, 3), atol=1e-4, rtol=1e-4)


@PROPS
@given(
    seed=SEEDS,
    tokens=st.integers(1, 9),
    heads=st.sampled_from([(4, 4), (4, 2), (3, 1)]),
    head_size=st.sampled_from([2, 8, 16]),
    dtype=DTYPES,
)
def test_rotary_embedding(seed, tokens, heads, head_size, dtype):
    g = torch.Generator().manual_seed(seed)
    max_pos = 32
    angles = torch.rand((max_pos, head_size // 2), generator=g) * 6.3
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1)  # [max_pos, D]
    positions = torch.randint(0, max_pos, (tokens,), generator=g)
    q = torch.randn((tokens, heads[0], head_size), generator=g).to(dtype)
    k = torch.randn((tokens, heads[1], head_size), generator=g).to(dtype)
    got_q, got_k = ops.rotary_embedding(positions, q, k, cache)
    want_q, want_k = reference.rotary_embedding(positions, q, k, cache)
    torch.testing.assert_close(got_q, want_q, **_tol(dtype))
    torch.testing.assert_close(got_k, want_k, **_tol(dtype))
    # a rotation keeps the norm of each half-pair
    torch.testing.assert_close(
        got_q.float().norm(dim=-1), q.float().norm(dim=-1), atol=3e-2, rtol=3e-2
    )


@PROPS
@given(
    seed=SEEDS,
    tokens=st.integers(1, 9),
    heads=st.sampled_from([(4, 4), (3, 1)]),
    dims=st.sampled_from([(8, 2), (16, 12), (12, 4)]),
    dtype=DTYPES,
)
def test_partial_rotary_turns_the_leading_dims_only(seed, tokens, heads, dims, dtype):
    """A table of R < D columns: the leading R of each head rotate as a head of R would,
    the other D - R pass unchanged (q and k as views into one fused row, as a layer has)."""
    g = torch.Generator().manual_seed(seed)
    d, r = dims
    angles = torch.rand((32, r // 2), generator=g) * 6.3
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1)  # [max_pos, R]
    positions = torch.randint(0, 32, (tokens,), generator=g)
    fused = torch.randn((tokens, (heads[0] + heads[1]) * d), generator=g).to(dtype)
    q = fused[:, : heads[0] * d].view(tokens, heads[0], d)
    k = fused[:, heads[0] * d :].view(tokens, heads[1], d)
    got_q, got_k = ops.rotary_embedding(positions, q, k, cache)
    want_q, want_k = reference.rotary_embedding(positions, q[..., :r], k[..., :r], cache)
    torch.testing.assert_close(got_q[..., :r], want_q, **_tol(dtype))
    torch.testing.assert_close(got_k[..., :r], want_k, **_tol(dtype))
    assert torch.equal(got_q[..., r:], q[..., r:]) and torch.equal(got_k[..., r:], k[..., r:])


def test_rotary_position_zero_is_identity():
    cache = torch.cat((torch.ones(4, 4), torch.zeros(4, 4)), dim=-1)
    q, k = torch.randn(3, 2, 8), torch.randn(3, 1, 8)
    rq, rk = ops.rotary_embedding(torch.zeros(3, dtype=torch.int32), q, k, cache)
    assert torch.equal(rq, q) and torch.equal(rk, k)


@PROPS
@given(seed=SEEDS, tokens=st.integers(0, 9), inter=st.integers(1, 32), dtype=DTYPES)
def test_silu_and_mul(seed, tokens, inter, dtype):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn((tokens, 2 * inter), generator=g) * 4).to(dtype)
    got = ops.silu_and_mul(x)
    assert got.shape == (tokens, inter)
    torch.testing.assert_close(got, reference.silu_and_mul(x), **_tol(dtype))


@PROPS
@given(seed=SEEDS, tokens=st.integers(0, 9), inter=st.integers(1, 32), dtype=DTYPES)
def test_gelu_tanh_and_mul(seed, tokens, inter, dtype):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn((tokens, 2 * inter), generator=g) * 4).to(dtype)
    got = ops.gelu_tanh_and_mul(x)
    assert got.shape == (tokens, inter)
    torch.testing.assert_close(got, reference.gelu_tanh_and_mul(x), **_tol(dtype))


@PROPS
@given(
    seed=SEEDS,
    tokens=st.integers(0, 12),
    blocks=st.integers(1, 6),
    block_size=st.sampled_from([1, 2, 4, 8]),
    kv_heads=st.integers(1, 3),
    padding=st.floats(0, 0.5),
)
def test_write_kv_cache(seed, tokens, blocks, block_size, kv_heads, padding):
    g = torch.Generator().manual_seed(seed)
    num_slots = blocks * block_size
    tokens = min(tokens, num_slots)
    slots = torch.randperm(num_slots, generator=g)[:tokens]  # distinct, shuffled slots
    slots[torch.rand(tokens, generator=g) < padding] = -1
    k = torch.randn((tokens, kv_heads, 4), generator=g)
    v = torch.randn((tokens, kv_heads, 4), generator=g)
    caches = [torch.randn((blocks, block_size, kv_heads, 4), generator=g) for _ in range(2)]
    want = [c.clone() for c in caches]
    ops.write_kv_cache(k, v, caches[0], caches[1], slots)
    reference.write_kv_cache(k, v, want[0], want[1], slots)
    assert torch.equal(caches[0], want[0]) and torch.equal(caches[1], want[1])


def test_write_kv_cache_into_a_non_contiguous_cache():
    full = torch.zeros(2, 3, 4, 2, 8)  # [K/V, N, S, KVH, D] -> each cache is a strided view
    k_cache, v_cache = full[0, :, :, :, ::2], full[1, :, :, :, ::2]
    k, v = torch.ones(2, 2, 4), torch.full((2, 2, 4), 2.0)
    ops.write_kv_cache(k, v, k_cache, v_cache, torch.tensor([5, -1]))
    assert torch.equal(k_cache[1, 1], k[0]) and torch.equal(v_cache[1, 1], v[0])
    assert k_cache.sum() == k[0].sum() and v_cache.sum() == v[0].sum()


@pytest.mark.parametrize("cache_dtype", [torch.float16, torch.bfloat16])
def test_write_kv_cache_casts_to_cache_dtype(cache_dtype):
    k_cache = torch.zeros(1, 2, 1, 4, dtype=cache_dtype)
    v_cache = torch.zeros_like(k_cache)
    k = torch.randn(2, 1, 4)
    ops.write_kv_cache(k, k, k_cache, v_cache, torch.tensor([1, 0]))
    assert torch.equal(k_cache[0, 1], k[0].to(cache_dtype))
