"""The oneDNN linear: equal to a float64 reference, re-packed when the weight changes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels.ops.linear import (
    PackedWeight,
    linear,
    onednn_dtypes,
    pack_weight,
    padded_rows,
)

PROPS = settings(max_examples=30, deadline=None)
needs_onednn = pytest.mark.skipif(
    torch.float32 not in onednn_dtypes(), reason="this torch build has no oneDNN"
)


def _reference(x, w, b):
    out = F.linear(x.double(), w.double(), None if b is None else b.double())
    return out.to(x.dtype)


@needs_onednn
@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    lead=st.lists(st.integers(0, 5), min_size=0, max_size=2),
    k=st.integers(1, 96),
    n=st.integers(1, 96),
    bias=st.booleans(),
    strided=st.booleans(),
)
def test_matches_reference(seed, lead, k, n, bias, strided):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((*lead, 2 * k), generator=g)
    x = x[..., ::2] if strided else x[..., :k]  # a strided view or a plain slice
    w = torch.randn((n, k), generator=g)
    b = torch.randn(n, generator=g) if bias else None
    packed = pack_weight(w)
    assert packed is not None and packed.is_mkldnn
    got = linear(x, w, b, packed)
    assert got.shape == (*lead, n) and got.dtype == torch.float32 and not got.is_mkldnn
    torch.testing.assert_close(got, _reference(x, w, b), atol=1e-4, rtol=1e-4)


@needs_onednn
def test_repacked_when_the_weight_changes_in_place():
    w = torch.randn(8, 16)
    x = torch.randn(3, 16)
    pack = PackedWeight()
    first = pack.get(w)
    assert pack.get(w) is first  # unchanged weight: the same copy
    with torch.no_grad():
        w.mul_(-2.0)  # what load_weights does: copy into the parameter
    second = pack.get(w)
    assert second is not first
    torch.testing.assert_close(linear(x, w, None, second), F.linear(x, w))
    pack.clear()
    assert pack.get(w) is not second


def test_falls_back_where_onednn_cannot_run():
    w = torch.randn(4, 6, dtype=torch.float64)
    assert pack_weight(w) is None  # float64 has no oneDNN path
    x = torch.randn(2, 6, dtype=torch.float64)
    torch.testing.assert_close(linear(x, w, None, None), F.linear(x, w))


@needs_onednn
def test_gradients_use_the_plain_path():
    w = torch.randn(4, 6, requires_grad=True)
    x = torch.randn(2, 6, requires_grad=True)
    out = linear(x, w, None, pack_weight(w))
    out.sum().backward()  # oneDNN's packed copy has no autograd: F.linear ran
    torch.testing.assert_close(x.grad, w.detach().sum(0).expand(2, 6))


@needs_onednn
def test_dtype_mismatch_uses_the_plain_path():
    w = torch.randn(4, 6)
    x = torch.randn(2, 6, dtype=torch.float64)
    with pytest.raises(RuntimeError):  # F.linear's own dtype error, not a wrong answer
        linear(x, w, None, pack_weight(w))


@pytest.mark.parametrize(
    ("x", "w", "match"),
    [
        (torch.randn(2, 5), torch.randn(4, 6), r"x must have shape \[\.\.\., 6\]"),
        (torch.randn(2, 6), torch.randn(24), "weight must have 2 dimensions"),
        ([1.0], torch.randn(4, 6), "x must be a torch.Tensor"),
        (torch.ones(2, 6, dtype=torch.long), torch.randn(4, 6), "x must have dtype in"),
    ],
)
def test_bad_arguments_are_named(x, w, match):
    with pytest.raises((TypeError, ValueError), match=match):
        linear(x, w)


@given(m=st.integers(0, 10_000))
def test_padded_rows_bounds_the_shapes(m):
    rows = padded_rows(m)
    assert rows >= max(m, 1)
    if m > 16:
        assert rows <= 1.25 * m
    assert padded_rows(rows) == rows  # a bucket is its own bucket


def test_few_shapes_cover_every_batch():
    assert len({padded_rows(m) for m in range(1, 2049)}) <= 33


@needs_onednn
@pytest.mark.parametrize("m", [0, 3, 17, 21, 100, 278])
def test_padded_calls_match_reference(m):
    g = torch.Generator().manual_seed(m)
    x, w, b = torch.randn(m, 40, generator=g), torch.randn(24, 40, generator=g), torch.randn(24)
    got = linear(x, w, b, pack_weight(w))
    assert got.shape == (m, 24)
    torch.testing.assert_close(got, _reference(x, w, b), atol=1e-4, rtol=1e-4)
