"""GGUF block weights (``gguf_blocks``) and ``tandem::torch_linear_gguf`` against the
reference: dequantize, then multiply."""

from __future__ import annotations

import pytest
import torch
from gguf_cases import int8_bound, weight_and_x
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tandem.kernels.gguf_blocks import (
    FLOAT16,
    FORMATS,
    QuantWeight,
    block_values,
    dequantize,
    quantize,
)
from tandem.kernels.native import linear_gguf as native
from tandem.kernels.ops.gguf_linear import gguf_rows, linear_gguf, reference

# the formats whose kernels round x to int8 per 32 values (F16 / BF16 keep x in fp32:
# test_linear_gguf_half.py)
QTYPES = sorted(set(FORMATS) - FLOAT16.keys())


@pytest.mark.parametrize("qtype", sorted(FORMATS))
def test_blocks_read_as_the_gguf_package_reads_them(qtype) -> None:
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize as theirs

    w = torch.randn(6, 512, generator=torch.Generator().manual_seed(qtype))
    qw = quantize(w, qtype)
    kind = gguf.GGMLQuantizationType[FORMATS[qtype][0]]
    ours = dequantize(qw.data, qtype, 512)
    want = torch.from_numpy(theirs(qw.data.numpy(), kind)).reshape(6, 512)
    assert torch.equal(ours, want)
    # one quantization step per block range; a K-quant's also has its 4/6/8-bit scales'
    # rounding; F16 / BF16 half a unit in the last place
    steps = {8: 1 / 127, 2: 1 / 7, 3: 1 / 15, 6: 1 / 15, 7: 1 / 31}
    steps |= {10: 1 / 3, 11: 1 / 5, 12: 1 / 8, 13: 1 / 16, 14: 1 / 32, 1: 2**-11, 30: 2**-8}
    assert (ours - w).abs().max() <= steps[qtype] * w.abs().max() + 1e-3


@settings(max_examples=30, deadline=None)
@given(
    qtype=st.sampled_from(QTYPES),
    m=st.integers(0, 9),
    blocks=st.integers(1, 6),
    n=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
)
@example(qtype=3, m=1, blocks=18, n=17, seed=0)  # a decode row, an odd count of blocks
@example(qtype=8, m=9, blocks=2, n=9, seed=1)  # two row groups and a tail, a band's tail
@example(qtype=6, m=5, blocks=3, n=9, seed=5)  # the 5-bit blocks
@example(qtype=7, m=1, blocks=4, n=10, seed=6)
@example(qtype=12, m=1, blocks=3, n=17, seed=2)  # K-quant decode rows: super-blocks of 256
@example(qtype=13, m=6, blocks=2, n=9, seed=3)
@example(qtype=14, m=5, blocks=1, n=11, seed=4)
@example(qtype=14, m=1, blocks=4, n=13, seed=9)  # two weight rows at a time, an odd tail
@example(qtype=13, m=2, blocks=3, n=3, seed=10)
@example(qtype=12, m=2, blocks=2, n=9, seed=11)
@example(qtype=10, m=3, blocks=3, n=7, seed=7)  # the 2- and 3-bit K-quants
@example(qtype=11, m=4, blocks=2, n=5, seed=8)
def test_kernel_matches_reference(qtype, m, blocks, n, seed) -> None:
    k = block_values(qtype) * (blocks if block_values(qtype) == 32 else (blocks + 1) // 2)
    qw, x = weight_and_x(qtype, n, m, k, seed)
    got = linear_gguf(x, qw)
    want = reference(x, qw.data, qtype, k)
    assert got.shape == (m, n) and got.dtype == torch.float32
    w = dequantize(qw.data, qtype, k)
    assert ((got - want).abs() <= int8_bound(x, w)).all()


def _sum_order_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Two kernels with the same rounding of x, fp32 sums in another order only."""
    return 1e-5 * (x.abs() @ w.abs().t()) + 1e-5


@settings(max_examples=25, deadline=None)
@given(
    qtype=st.sampled_from(QTYPES),
    m=st.integers(1, 40),
    blocks=st.integers(1, 4),
    n=st.integers(1, 30),
    seed=st.integers(0, 2**31 - 1),
)
@example(qtype=12, m=33, blocks=2, n=13, seed=0)  # panels of 16 and a tail, tiles of 6 and one
@example(qtype=7, m=1, blocks=1, n=1, seed=1)
@example(qtype=10, m=17, blocks=2, n=7, seed=2)
@example(qtype=11, m=16, blocks=1, n=13, seed=3)
def test_prefill_tiles_match_reference(qtype, m, blocks, n, seed) -> None:
    """The fp32-tile kernel (which the op takes from ``PREFILL_ROWS`` rows), at any M: the
    reference within x's int8 rounding, and the int8 kernel within fp32 sum order."""
    k = block_values(qtype) * blocks
    qw, x = weight_and_x(qtype, n, m, k, seed)
    got = native.linear(x, qw.data, qtype, k, tiles=True)
    if got is None:
        pytest.skip("no C kernels here")
    w = dequantize(qw.data, qtype, k)
    assert ((got - reference(x, qw.data, qtype, k)).abs() <= int8_bound(x, w)).all()
    rows = native.linear(x, qw.data, qtype, k, tiles=False)
    assert ((got - rows).abs() <= _sum_order_bound(x, w)).all()


def test_prefill_rows_take_the_tiles_and_agree_with_decode_rows() -> None:
    """From ``PREFILL_ROWS`` rows the op runs the tiles; a row's result does not depend on
    the batch it ran in beyond fp32 sum order (engines batch differently)."""
    qw = quantize(torch.randn(70, 512), 13)
    w = dequantize(qw.data, 13, 512)
    for m in (native.PREFILL_ROWS, 3 * native.PREFILL_ROWS + 1):
        x = torch.randn(m, 512)
        got = linear_gguf(x, qw)
        if native.library() is None:
            return
        assert torch.equal(got, native.linear(x, qw.data, 13, 512, tiles=True))
        one_by_one = torch.cat([linear_gguf(x[i : i + 1], qw) for i in range(m)])
        assert ((got - one_by_one).abs() <= _sum_order_bound(x, w)).all()


def test_leading_dims_and_dtypes() -> None:
    qw = quantize(torch.randn(8, 64), 3)
    x = torch.randn(2, 3, 64)
    got = linear_gguf(x, qw)
    assert got.shape == (2, 3, 8)
    torch.testing.assert_close(got.reshape(6, 8), linear_gguf(x.reshape(6, 64), qw))
    assert linear_gguf(x.double(), qw).dtype == torch.float32


def test_bad_input_is_named() -> None:
    qw = quantize(torch.randn(8, 64), 8)
    with pytest.raises(ValueError, match=r"x must have shape \[\.\.\., 64\]"):
        linear_gguf(torch.randn(2, 32), qw)
    with pytest.raises(TypeError, match="weight must be a QuantWeight"):
        linear_gguf(torch.randn(2, 64), torch.randn(8, 64))
    with pytest.raises(ValueError, match="qtype must be one of"):
        QuantWeight(qw.data, 5, 8, 64)
    with pytest.raises(ValueError, match="data must be uint8 of shape"):
        QuantWeight(qw.data[:4], 8, 8, 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize(torch.randn(2, 40), 2)
    with pytest.raises(ValueError, match="Q6_K row needs k to be a multiple of 256"):
        quantize(torch.randn(2, 96), 14)


def test_opcheck() -> None:
    op = torch.ops.tandem.torch_linear_gguf
    for qtype, k in ((2, 64), (12, 256), (14, 512), (10, 256), (11, 512), (1, 77), (30, 40)):
        qw = quantize(torch.randn(8, k), qtype)
        for m in (3, native.PREFILL_ROWS + 1):  # the decode kernel and the prefill one
            torch.library.opcheck(op, (torch.randn(m, k), qw.data, qw.qtype, qw.k))


@settings(max_examples=30, deadline=None)
@given(
    qtype=st.sampled_from(sorted(FORMATS)),
    n=st.integers(1, 12),
    ids=st.lists(st.integers(0, 11), min_size=0, max_size=20),
    seed=st.integers(0, 2**31 - 1),
)
def test_embedding_rows_are_the_blocks_decoded(qtype, n, ids, seed) -> None:
    """The C lookup decodes a table's rows to the values the reference dequantizes, bit
    for bit (the model's embedding reads its GGUF table through it)."""
    g = torch.Generator().manual_seed(seed)
    qw = quantize(torch.randn(n, max(block_values(qtype), 19) * 2, generator=g), qtype)
    index = torch.tensor([i % n for i in ids], dtype=torch.int64)
    got = gguf_rows(qw, index)
    want = dequantize(qw.data, qtype, qw.k)[index]
    assert got.shape == (len(ids), qw.k) and torch.equal(got, want)
    if native.library() is not None and ids:
        assert native.rows(qw.data, index, qtype, qw.k) is not None  # C took the call


def test_embedding_rows_name_an_id_out_of_range() -> None:
    qw = quantize(torch.randn(4, 32), 8)
    for bad in (4, -1):
        with pytest.raises(IndexError, match=f"token id {bad} is out of range for a table of 4"):
            gguf_rows(qw, torch.tensor([0, bad]))
