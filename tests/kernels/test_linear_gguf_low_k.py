"""The 2- and 3-bit K-quants (Q2_K, Q3_K) against the ``gguf`` package's reference: blocks
of random bytes (every code, every scale; only d and dmin kept finite), rows decoded bit for
bit, and both linear paths (decode M = 1..4 and beyond, the fp32 tiles from 16 rows) within
x's int8 rounding of dequantize-then-matmul."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gguf_cases import int8_bound
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tandem.kernels.gguf_blocks import FORMATS, QuantWeight, quantize
from tandem.kernels.native import linear_gguf as native
from tandem.kernels.ops.gguf_linear import gguf_rows, linear_gguf

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

LOW_K = (10, 11)  # Q2_K, Q3_K
SCALES_AT = {10: (80, 84), 11: (108, 110)}  # where each super-block's f16 d (and dmin) lie


def random_blocks(qtype: int, n: int, k: int, g: torch.Generator) -> QuantWeight:
    """n rows of k / 256 super-blocks of random bytes, their f16 scales finite (~0.05)."""
    size = FORMATS[qtype][1]
    data = torch.randint(0, 256, (n, k // 256, size), generator=g, dtype=torch.uint8)
    lo, hi = SCALES_AT[qtype]
    scales = (torch.randn(n, k // 256, (hi - lo) // 2, generator=g) * 0.05).to(torch.float16)
    data[..., lo:hi] = scales.view(torch.uint8)
    return QuantWeight(data.reshape(n, -1).contiguous(), qtype, n, k)


def theirs(qw: QuantWeight) -> torch.Tensor:
    kind = gguf.GGMLQuantizationType(qw.qtype)
    return torch.from_numpy(gguf_dequantize(qw.data.numpy(), kind)).reshape(qw.n, qw.k)


@settings(max_examples=20, deadline=None)
@given(
    qtype=st.sampled_from(LOW_K),
    n=st.integers(1, 9),
    supers=st.integers(1, 3),
    ids=st.lists(st.integers(0, 8), min_size=1, max_size=12),
    seed=st.integers(0, 2**31 - 1),
)
def test_rows_are_the_gguf_packages_values(qtype, n, supers, ids, seed) -> None:
    g = torch.Generator().manual_seed(seed)
    qw = random_blocks(qtype, n, 256 * supers, g)
    index = torch.tensor([i % n for i in ids])
    want = theirs(qw)[index]
    assert torch.equal(gguf_rows(qw, index), want)
    assert torch.equal(qw.rows(index), want)  # the torch reference, the same values
    if native.library() is not None:
        assert torch.equal(native.rows(qw.data, index, qtype, qw.k), want)


@settings(max_examples=30, deadline=None)
@given(
    qtype=st.sampled_from(LOW_K),
    m=st.sampled_from([1, 2, 3, 4, 5, 7, 16, 17, 33]),
    n=st.integers(1, 19),
    supers=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
@example(qtype=10, m=1, n=9, supers=2, seed=0)  # decode: one row of x, odd rows of W
@example(qtype=11, m=4, n=17, supers=3, seed=1)
@example(qtype=10, m=16, n=7, supers=1, seed=2)  # the fp32 tiles from 16 rows
@example(qtype=11, m=33, n=13, supers=2, seed=3)
def test_linear_matches_dequantize_then_matmul(qtype, m, n, supers, seed) -> None:
    g = torch.Generator().manual_seed(seed)
    qw = random_blocks(qtype, n, 256 * supers, g)
    x = torch.randn(m, qw.k, generator=g) * torch.rand(m, 1, generator=g).mul(4)
    w = theirs(qw)
    got = linear_gguf(x, qw)
    assert got.shape == (m, n) and got.dtype == torch.float32
    assert ((got - F.linear(x, w)).abs() <= int8_bound(x, w)).all()
    if native.library() is None:
        return
    for tiles in (False, True):  # both kernels at any M: x rounded alike, sums reordered
        other = native.linear(x, qw.data, qtype, qw.k, tiles=tiles)
        assert ((other - got).abs() <= 1e-5 * (x.abs() @ w.abs().t()) + 1e-5).all()


@pytest.mark.parametrize("qtype", LOW_K)
def test_quantize_makes_blocks_the_package_reads(qtype) -> None:
    """The round-to-nearest quantizer (the ``gguf`` package has none for these) writes
    blocks whose values the package reads as ours, near the floats."""
    w = torch.randn(5, 512, generator=torch.Generator().manual_seed(qtype))
    qw = quantize(w, qtype)
    assert qw.data.shape == (5, 2 * FORMATS[qtype][1])
    assert torch.equal(qw.rows(torch.arange(5)), theirs(qw))
    err = (theirs(qw) - w).norm() / w.norm()
    assert err < (0.4 if qtype == 10 else 0.2)


@pytest.mark.parametrize("qtype", LOW_K)
def test_rows_not_of_256_are_refused(qtype) -> None:
    name = FORMATS[qtype][0]
    with pytest.raises(ValueError, match=f"{name} row needs k to be a multiple of 256, got 288"):
        quantize(torch.randn(2, 288), qtype)
    with pytest.raises(ValueError, match=f"{name} row needs k to be a multiple of 256, got 96"):
        QuantWeight(torch.zeros(2, FORMATS[qtype][1], dtype=torch.uint8), qtype, 2, 96)
