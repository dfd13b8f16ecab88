"""The int8 linear layer in C (``native.linear_i8``) against torch's int8 path."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tandem.kernels import native
from tandem.kernels.native import linear_i8
from tandem.kernels.ops.linear_int8 import Int8Weight, int8_available, linear_int8

needs_vnni = pytest.mark.skipif(
    not linear_i8.available(),
    reason="no AVX-512 VNNI kernel here: " + (native.unavailable_reason() or "CPU lacks it"),
)


def _torch_path(x: torch.Tensor, weight: Int8Weight, outlier: float) -> torch.Tensor:
    """The same layer through torch._int_mm (the path taken without the C kernel)."""
    return linear_int8(x, weight.on_torch(), outlier)


@needs_vnni
@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.integers(1, 200),
    n=st.integers(1, 100),
    bias=st.booleans(),
    spikes=st.integers(0, 3),
    seed=st.integers(0, 2**31 - 1),
)
@example(m=17, k=5, n=33, bias=True, spikes=2, seed=1)  # tails of M, K, N and outliers
@example(m=1, k=1, n=1, bias=False, spikes=1, seed=2)  # the only column is an outlier
@example(m=1, k=300, n=97, bias=True, spikes=2, seed=3)  # decode's row, four tiles of N
def test_native_int8_linear_matches_torch_path(m, k, n, bias, spikes, seed) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    for i in range(spikes):  # outlier columns, as LLM activations have a few
        x[i % m, (5 * i) % k] = 40.0 + i
    w = torch.randn(n, k, generator=g) * 0.1
    b = torch.randn(n, generator=g) if bias else None
    weight = Int8Weight.pack(w, b)
    assert weight is not None and weight.native is not None
    got = linear_i8.linear(x, weight.native, weight.scale, weight.bias, 8.0)
    assert got is not None and got.shape == (m, n) and got.dtype == torch.float32
    want = _torch_path(x, weight, 8.0)
    # same integers up to round-half cases one step apart (x * (1/s) vs x / s)
    step = float(weight.scale.max()) * float(x.abs().max()) / 127.0 * 0.5 * k
    torch.testing.assert_close(got, want, atol=step / 50 + 1e-4, rtol=1e-4)


@needs_vnni
def test_blocks_over_a_huge_page_match_torch_path() -> None:
    """A weight whose blocks fill more than one huge page (a map of their own,
    ``memory.mapped_zeros``), with tails of N and K."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 1030, generator=g)
    weight = Int8Weight.pack(torch.randn(2100, 1030, generator=g) * 0.1)
    assert weight is not None and weight.native is not None
    assert weight.native.blocks.numel() >= 2 << 20
    got = linear_i8.linear(x, weight.native, weight.scale, weight.bias, 6.0)
    want = _torch_path(x, weight, 6.0)
    step = float(weight.scale.max()) * float(x.abs().max()) / 127.0 * 0.5 * 1030
    torch.testing.assert_close(got, want, atol=step / 50 + 1e-4, rtol=1e-4)


@needs_vnni
@pytest.mark.parametrize("n", [1, 64, 65, 130, 1000])
def test_a_decode_row_is_its_row_of_a_batch(n) -> None:
    """Decode's one row (its own tile) gets the very numbers the same row gets in a batch
    (eight-row tiles): the integer sums are exact and the epilogue is one."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(9, 260, generator=g)
    x[3, 7] = 50.0  # an outlier in the row taken alone
    weight = Int8Weight.pack(torch.randn(n, 260, generator=g) * 0.1, torch.randn(n, generator=g))
    assert weight is not None and weight.native is not None
    batch = linear_i8.linear(x, weight.native, weight.scale, weight.bias, 6.0)
    alone = linear_i8.linear(x[3:4], weight.native, weight.scale, weight.bias, 6.0)
    assert batch is not None and alone is not None
    assert torch.equal(alone[0], batch[3])


@needs_vnni
def test_native_int8_linear_is_what_linear_int8_runs() -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 9, 64, generator=g), torch.randn(70, 64, generator=g)
    weight = Int8Weight.pack(w)
    assert weight is not None and weight.native is not None
    direct = linear_i8.linear(x.reshape(-1, 64), weight.native, weight.scale, None, 8.0)
    assert torch.equal(linear_int8(x, weight), direct.view(3, 9, 70))


@needs_vnni
def test_native_int8_linear_with_no_rows_and_refusals() -> None:
    weight = Int8Weight.pack(torch.randn(8, 16))
    assert weight is not None and weight.native is not None
    empty = linear_i8.linear(torch.empty(0, 16), weight.native, weight.scale, None, 8.0)
    assert empty is not None and empty.shape == (0, 8)
    strided = torch.randn(16, 4).t()
    assert linear_i8.linear(strided, weight.native, weight.scale, None, 8.0) is None
    as_double = torch.randn(4, 16, dtype=torch.float64)
    assert linear_i8.linear(as_double, weight.native, weight.scale, None, 8.0) is None
    # linear_int8 takes any of them: it copies to fp32 contiguous first
    torch.testing.assert_close(
        linear_int8(strided, weight), _torch_path(strided.contiguous(), weight, 8.0)
    )


@pytest.mark.skipif(not int8_available(), reason="torch has no int8 matmul here")
def test_int8_weight_without_the_c_kernel_runs_on_torch(monkeypatch) -> None:
    monkeypatch.setattr(linear_i8, "available", lambda: False)
    weight = Int8Weight.pack(torch.randn(8, 16))
    assert weight is not None and weight.native is None
    x = torch.randn(5, 16)
    assert linear_int8(x, weight).shape == (5, 8)


@pytest.mark.skipif(not int8_available(), reason="torch has no int8 matmul here")
def test_int8_layer_gives_one_answer_on_every_path(monkeypatch) -> None:
    """The C layer, torch._int_mm between the C row passes, and torch alone agree."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(13, 96, generator=g) + 0.5
    x[2, 7] = 60.0  # an outlier column
    weight = Int8Weight.pack(torch.randn(40, 96, generator=g) * 0.1, torch.randn(40))
    assert weight is not None
    first = linear_int8(x, weight)
    weight = weight.on_torch()
    between = linear_int8(x, weight)
    monkeypatch.setattr(native, "quantize_rows", lambda *a: None)
    monkeypatch.setattr(native, "rescale", lambda *a: None)
    alone = linear_int8(x, weight)
    torch.testing.assert_close(first, between, atol=2e-3, rtol=1e-4)
    torch.testing.assert_close(between, alone, atol=2e-3, rtol=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 9),
    k=st.integers(1, 2200),
    n=st.integers(1, 24),
    extreme=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@example(m=3, k=2100, n=5, extreme=True, seed=0)  # three chunks of large sums
def test_int_matmul_is_the_exact_integer_product(m, k, n, extreme, seed) -> None:
    """The int8 product without VNNI (fp32 GEMM on chunks of K, or torch's int8 mm for one
    row) is the exact integer product, whatever K."""
    from tandem.kernels.ops.linear_int8 import _int_matmul

    g = torch.Generator().manual_seed(seed)
    if extreme:  # large odd sums: past 2^24 fp32 would round them
        xq = torch.full((m, k), 127, dtype=torch.int8)
        w = torch.full((n, k), 127, dtype=torch.int8)
    else:
        xq = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
        w = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    got = _int_matmul(xq, w)
    assert got.dtype == torch.int32
    assert torch.equal(got.long(), xq.long() @ w.long().t())


@needs_vnni
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 70), seed=st.integers(0, 2**31 - 1))
def test_the_blocks_alone_are_kept_and_read_back_as_the_plain_weight(n, k, seed) -> None:
    """With the C kernel's blocks no plain int8 copy is kept beside them: the weight is
    read back from the blocks, equal to the per-channel quantization of the floats."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed))
    weight = Int8Weight.pack(w)
    assert weight is not None and weight.native is not None and weight._plain is None
    want = (w / weight.scale[:, None]).round().clamp(-127, 127).to(torch.int8)
    assert torch.equal(weight.qweight, want)
    plain = weight.on_torch()
    assert plain.native is None and torch.equal(plain.qweight, want)
    assert plain.qweight is plain.qweight  # kept, not read back each time
