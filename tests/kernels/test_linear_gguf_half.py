"""F16 / BF16 weights kept 16-bit (GGUF types 1 and 30): ``linear_gguf`` is
``F.linear(x, w.float())`` with x not rounded, within fp32 sum order, on both paths (decode
M = 1..4 and beyond, the fp32 tiles from 16 rows), at any K; rows decode bit for bit as the
``gguf`` package reads them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gguf_cases import weight_and_x
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tandem.kernels.gguf_blocks import QuantWeight, dequantize, quantize
from tandem.kernels.native import linear_gguf as native
from tandem.kernels.ops.gguf_linear import gguf_rows, linear_gguf

HALF = (1, 30)  # F16, BF16


def sum_order(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """How far two fp32 sums of the same k products may be apart: k units of rounding
    of the sum of magnitudes, each side."""
    k = x.shape[1]
    return 2 * k * 2**-24 * (x.abs() @ w.abs().t()) + 1e-30


@settings(max_examples=40, deadline=None)
@given(
    qtype=st.sampled_from(HALF),
    m=st.sampled_from([1, 2, 3, 4, 5, 9, 16, 17, 35]),
    n=st.integers(1, 21),
    k=st.integers(1, 150),
    seed=st.integers(0, 2**31 - 1),
)
@example(qtype=1, m=1, n=9, k=64, seed=0)  # whole vectors only
@example(qtype=30, m=4, n=13, k=77, seed=1)  # a tail of k past the vectors, odd rows
@example(qtype=1, m=3, n=5, k=7, seed=2)  # shorter than a vector
@example(qtype=30, m=16, n=7, k=40, seed=3)  # the fp32 tiles
@example(qtype=1, m=4, n=9, k=1100, seed=4)  # x's rows past L1: tiles of weight rows
@example(qtype=30, m=3, n=6, k=1501, seed=5)
@example(qtype=1, m=6, n=5, k=2100, seed=6)  # four rows in tiles, then two
def test_linear_is_float_linear_on_the_widened_weight(qtype, m, n, k, seed) -> None:
    qw, x = weight_and_x(qtype, n, m, k, seed)
    w = dequantize(qw.data, qtype, k)
    got = linear_gguf(x, qw)
    assert got.shape == (m, n) and got.dtype == torch.float32
    want = F.linear(x, w)
    assert ((got - want).abs() <= sum_order(x, w)).all()
    if native.library() is None:
        return
    for tiles in (False, True):  # either kernel at any M
        other = native.linear(x, qw.data, qtype, k, tiles=tiles)
        assert ((other - want).abs() <= sum_order(x, w)).all()


def test_x_is_not_rounded() -> None:
    """Unlike the block formats, x keeps its fp32 bits: a weight of ones sums x exactly
    where x's values are exact in fp32 sums (integers), int8 rounding would move them."""
    for qtype in HALF:
        qw = quantize(torch.ones(3, 40), qtype)
        x = torch.arange(80, dtype=torch.float32).reshape(2, 40) - 3.0  # 127 steps do not fit
        x[1] = 1000.0
        x[1, 0] = 1.0
        for m in (2, 16):
            xs = x.repeat(m // 2, 1)
            assert torch.equal(linear_gguf(xs, qw), xs.sum(-1, keepdim=True).expand(m, 3))


@settings(max_examples=20, deadline=None)
@given(
    qtype=st.sampled_from(HALF),
    n=st.integers(1, 9),
    k=st.integers(1, 100),
    ids=st.lists(st.integers(0, 8), min_size=1, max_size=10),
    seed=st.integers(0, 2**31 - 1),
)
def test_rows_are_the_gguf_packages_values(qtype, n, k, ids, seed) -> None:
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize as theirs

    g = torch.Generator().manual_seed(seed)
    raw = torch.randn(n, k, generator=g) * 100
    qw = quantize(raw, qtype)
    index = torch.tensor([i % n for i in ids])
    kind = gguf.GGMLQuantizationType(qtype)
    want = torch.from_numpy(theirs(qw.data.numpy(), kind)).reshape(n, k)[index]
    assert torch.equal(gguf_rows(qw, index), want)
    if native.library() is not None:
        assert torch.equal(native.rows(qw.data, index, qtype, k), want)


def test_the_constructor_takes_the_files_bytes() -> None:
    """A loader builds the weight from the file's rows: 2 k bytes a row, one channel a row."""
    w = torch.randn(3, 5)
    raw = w.to(torch.bfloat16).view(torch.uint8)  # [3, 10], as stored
    qw = QuantWeight(raw, 30, 3, 5)
    assert qw.name == "BF16" and torch.equal(qw.rows(torch.arange(3)), w.bfloat16().float())
    with pytest.raises(ValueError, match=r"data must be uint8 of shape \[3, 10\]"):
        QuantWeight(raw[:, :5], 30, 3, 5)
