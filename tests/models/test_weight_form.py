"""Weight forms: each form's matmul against the float reference within its format's
tolerance (GGUF blocks against the ``gguf`` package's own dequantizer), row lookups, the
C decode stack's table entry (or the reason there is none), the moves between forms, and
the layers that hold exactly one form."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.layers.embedding import Embedding
from tandem.core.layers.linear import Linear
from tandem.core.layers.weight_form import Dense, GgufBlocks, Int8, StackedParts, gguf_form
from tandem.kernels.gguf_blocks import FLOAT16, FORMATS, QuantStack, block_values, quantize
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native import linear_f32
from tandem.kernels.native.linear_gguf import supports
from tandem.kernels.ops.linear_int8 import Int8Weight, int8_available, linear_int8

needs_int8 = pytest.mark.skipif(not int8_available(), reason="torch has no int8 matmul here")


def _dense(w: torch.Tensor, kernel: str = "native") -> Dense:
    form = Dense({"weight": w})  # a module's parameter dict holds the weight
    form.use_kernel(kernel)
    return form


def _theirs(blocks) -> torch.Tensor:
    """The blocks as the gguf package decodes them: [n, k] fp32."""
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize

    kind = gguf.GGMLQuantizationType[blocks.name]
    return torch.from_numpy(dequantize(blocks.data.numpy(), kind)).reshape(blocks.n, blocks.k)


def _data(draw_seed: int, m: int, n: int, k: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(draw_seed)
    x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g).mul(3)
    return x, torch.randn(n, k, generator=g) * 0.3, torch.randn(n, generator=g)


@settings(max_examples=25, deadline=None)
@given(
    kernel=st.sampled_from(["native", "onednn", "torch"]),
    m=st.integers(1, 40),
    n=st.integers(1, 48),
    k=st.integers(1, 96),
    bias=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_dense_is_the_float_product(kernel, m, n, k, bias, seed) -> None:
    x, w, b = _data(seed, m, n, k)
    b = b if bias else None
    got = _dense(w, kernel).matmul(x, b)
    want = F.linear(x, w, b)
    if kernel == "torch":  # plain F.linear: the same numbers
        assert torch.equal(got, want)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * k)


@needs_int8
@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 24),
    n=st.integers(1, 40),
    k=st.integers(1, 160),
    seed=st.integers(0, 2**31 - 1),
)
def test_int8_is_within_its_rounding_of_the_float_product(m, n, k, seed) -> None:
    x, w, b = _data(seed, m, n, k)
    form = _dense(w).quantized()
    assert isinstance(form, Int8) and form.name == "int8" and form.shape == (n, k)
    got = form.matmul(x, b)
    # half a step of each weight row (max|row| / 127) and of each token (its range / 255)
    w_half = w.abs().amax(1) / 254
    x_half = (x.amax(1).clamp_min(0) - x.amin(1).clamp_max(0)) / 510
    bound = x.abs().sum(1, keepdim=True) * w_half + x_half[:, None] * w.abs().sum(1)
    bound += k * x_half[:, None] * w_half + 1e-4
    assert ((got - F.linear(x, w, b)).abs() <= 1.01 * bound).all()
    # the bias given per call lands where a bias packed with the weight does
    assert torch.equal(got, linear_int8(x, Int8Weight.pack(w, b)))


QTYPES = sorted(FORMATS)


@settings(max_examples=30, deadline=None)
@given(
    qtype=st.sampled_from(QTYPES),
    m=st.integers(1, 9),
    blocks=st.integers(1, 4),
    n=st.integers(1, 24),
    seed=st.integers(0, 2**31 - 1),
)
def test_gguf_blocks_multiply_and_look_up_as_the_gguf_package_decodes(
    qtype, m, blocks, n, seed
) -> None:
    size = block_values(qtype)
    k = max(size, 32) * blocks
    x, w, b = _data(seed, m, n, k)
    form = gguf_form(quantize(w, qtype))
    assert isinstance(form, GgufBlocks) and form.shape == (n, k)
    assert form.name == f"gguf {FORMATS[qtype][0]}"
    exact = _theirs(form.blocks)
    got, want = form.matmul(x, b), F.linear(x, exact, b)
    assert got.dtype == torch.float32
    if qtype in FLOAT16:  # x stays fp32: only the order of the sums differs
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * k)
    else:  # x rounded to int8 per 32 values: half a step each, times |W|
        half = x.reshape(m, k // 32, 32).abs().amax(-1) / 254  # [m, k / 32]
        per_value = half.repeat_interleave(32, dim=1)
        bound = per_value @ exact.abs().t() + 1e-4 * (x.abs() @ exact.abs().t()) + 1e-4
        assert ((got - want).abs() <= 1.01 * bound).all()
    ids = torch.tensor([n - 1, 0, n // 2])
    assert torch.equal(form.rows(ids), exact[ids])


def test_stacked_parts_multiply_each_part_in_turn() -> None:
    g = torch.Generator().manual_seed(0)
    w, x, b = torch.randn(48, 256, generator=g), torch.randn(3, 256, generator=g), torch.randn(48)
    top, rest = quantize(w[:32], 12), quantize(w[32:], 14)
    form = gguf_form(QuantStack((top, rest)))
    assert isinstance(form, StackedParts) and form.parts == (top, rest)
    assert form.shape == (48, 256) and form.name == "gguf Q4_K+Q6_K"
    parts = torch.cat([GgufBlocks(top).matmul(x), GgufBlocks(rest).matmul(x)], dim=1)
    assert torch.equal(form.matmul(x, b), parts + b)
    with pytest.raises(TypeError, match="no row lookup"):
        form.rows(torch.tensor([0]))
    with pytest.raises(TypeError, match="blocks must be a QuantWeight or QuantStack"):
        gguf_form(w)


@pytest.mark.skipif(not native.available(), reason="the C decode stack did not build")
def test_c_entries_and_the_reasons_for_none() -> None:
    g = torch.Generator().manual_seed(1)
    w, bias = torch.randn(40, 256, generator=g), torch.randn(40, generator=g)
    keep: list[torch.Tensor] = []
    stack = gguf_form(QuantStack((quantize(w[:16], 12), quantize(w[16:], 8))))
    entry = stack.c_entry(bias, keep)
    assert isinstance(entry, native.LinSpec) and entry.kind == native.GGUF
    assert (entry.qtypes, entry.rows, entry.n, entry.k) == ((12, 8), (16, 24), 40, 256)
    assert all(any(t is kept for kept in keep) for t in (*entry.weights, bias))
    one = gguf_form(quantize(w, 8)).c_entry(None, keep)
    assert isinstance(one, native.LinSpec) and (one.qtypes, one.rows) == ((8,), (40,))
    if linear_f32.available():
        entry = _dense(w).c_entry(None, keep)
        assert isinstance(entry, native.LinSpec) and entry.kind == native.F32
        assert (entry.n, entry.k) == (40, 256) and entry.weights[0] is keep[-1]
    before = len(keep)
    assert "torch kernel" in _dense(w, "torch").c_entry(None, keep)
    assert "bias" in stack.c_entry(bias.to(torch.bfloat16), keep)
    if int8_available():
        int8 = _dense(w).quantized()
        entry = int8.c_entry(None, keep)
        if int8.weight.native is None:  # torch's int8 matmul: the C stack cannot call it
            assert "int8" in entry
        else:  # the blocked weight, its channel sums and scales held while the table is
            assert isinstance(entry, native.LinSpec) and entry.kind == native.I8
            assert (entry.n, entry.k) == (40, 256)
            held = (*entry.weights, *entry.int8[:2])
            assert all(any(t is kept for kept in keep) for t in held)
            before += len(held)
    assert len(keep) == before  # nothing kept for an entry not made
    assert all(supports(q) for q in (8, 12))


@needs_int8
def test_forms_move_into_one_another() -> None:
    w = torch.randn(8, 32)
    dense = _dense(w)
    dense.prepare()
    assert dense.pack.holds(w)
    int8 = dense.quantized()
    assert int8 is not None and int8.dense is dense
    assert int8.moved() is dense and not dense.pack.holds(w)  # the copy is dropped
    blocks = gguf_form(quantize(w, 8))
    assert blocks.quantized() is None and blocks.moved() is blocks
    assert not blocks.plain(w) and _dense(w, "torch").plain(w) and not dense.plain(w)


def test_linear_holds_one_form_and_forward_is_its_product() -> None:
    layer = Linear(64, 24)
    x = torch.randn(5, 64)
    assert isinstance(layer.form, Dense) and layer.form.name == "float32"
    assert torch.equal(layer(x), layer.form.matmul(x, layer.bias))
    layer.use_kernel("torch")
    assert layer.kernel == "torch" and torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    if int8_available():
        assert layer.quantize() and isinstance(layer.form, Int8)
        assert torch.equal(layer(x), layer.form.matmul(x, layer.bias))
        layer.to(torch.float32)  # moving drops the int8 copy: the float weight again
        assert isinstance(layer.form, Dense)
    blocks = quantize(layer.weight.detach(), 3)
    layer.use_quantized(blocks)
    assert layer.form.blocks is blocks and not layer.quantize()
    assert torch.equal(layer(x), layer.form.matmul(x).add_(layer.bias))
    with pytest.raises(ValueError, match=r"quantized weight is \[24, 64\], the layer \[24, 32\]"):
        Linear(32, 24).use_quantized(blocks)
    with pytest.raises(ValueError, match="kernel must be one of"):
        layer.use_kernel("fast")


def test_embedding_looks_rows_up_in_its_form() -> None:
    table = Embedding(40, 64)
    ids = torch.tensor([3, 0, 39])
    assert torch.equal(table(ids), F.embedding(ids, table.weight))
    blocks = quantize(table.weight.detach(), 8)
    table.use_quantized(blocks)
    assert table.form.blocks is blocks and torch.equal(table(ids), _theirs(blocks)[ids])
    with pytest.raises(ValueError, match=r"the embedding \[40, 32\]"):
        Embedding(40, 32).use_quantized(blocks)
