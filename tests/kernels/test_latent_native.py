"""Latent attention's projections in C (``native/latent.c``): the query taken into the
latent's basis and the attended latent taken out to each head's values, against torch's
batched products over kv_b's per-head key and value rows."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels.native import latent

pytestmark = pytest.mark.skipif(not latent.available(), reason="no C kernels here")
PROPS = settings(max_examples=30, deadline=None)
DIMS = st.tuples(
    st.integers(1, 5), st.integers(1, 20), st.sampled_from([2, 8]), st.integers(1, 20),
    st.integers(1, 40),
)  # fmt: skip


@PROPS
@given(seed=st.integers(0, 2**31 - 1), tokens=st.integers(0, 20), dims=DIMS)
def test_query_is_each_heads_q_nope_through_its_key_rows(seed, tokens, dims):
    h, n, p, v, r = dims
    g = torch.Generator().manual_seed(seed)
    proj = torch.randn(tokens, h * (n + p), generator=g)
    kv_b = torch.randn(h * (n + v), r, generator=g)
    got = latent.query(proj, kv_b, dims)
    assert got is not None and got.shape == (tokens, h, r + p)
    q_nope = proj.view(tokens, h, n + p)[..., :n]
    want = torch.einsum("thn,hnr->thr", q_nope, kv_b.view(h, n + v, r)[:, :n])
    torch.testing.assert_close(got[..., :r], want, atol=1e-5, rtol=1e-5)


@PROPS
@given(seed=st.integers(0, 2**31 - 1), tokens=st.integers(0, 20), dims=DIMS)
def test_value_is_each_heads_latent_through_its_value_rows(seed, tokens, dims):
    h, n, _, v, r = dims
    g = torch.Generator().manual_seed(seed)
    o_lat = torch.randn(tokens, h, r, generator=g)
    kv_b = torch.randn(h * (n + v), r, generator=g)
    got = latent.value(o_lat, kv_b, dims)
    assert got is not None and got.shape == (tokens, h * v)
    want = torch.einsum("thr,hvr->thv", o_lat, kv_b.view(h, n + v, r)[:, n:])
    torch.testing.assert_close(got, want.reshape(tokens, h * v), atol=1e-5, rtol=1e-5)


def test_what_c_does_not_take_is_left_to_torch():
    dims = (2, 3, 2, 4, 6)
    kv_b = torch.randn(2 * 7, 6)
    assert latent.query(torch.randn(3, 10, dtype=torch.float64), kv_b.double(), dims) is None
    assert latent.query(torch.randn(3, 11), kv_b, dims) is None  # not H (N + P) wide
    assert latent.value(torch.randn(3, 2, 6).transpose(0, 1), kv_b, dims) is None
    big = torch.zeros(2, latent.MAX_BLOCK + 1, 1, 4)  # a block beyond latent.c's bound
    lens, tables = torch.tensor([3], dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32)
    assert latent.attend(torch.randn(1, 2, 8), big, big, lens, tables, None, 0.5, 6) is None
