"""The fp32 linear layer in C (``native.linear_f32``: AVX-512, or AVX2 + FMA) against a
float64 reference."""

from __future__ import annotations

import ctypes
import platform
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tandem.kernels import native
from tandem.kernels.native import linear_f32
from tandem.kernels.native.linear_f32 import PackedF32
from tandem.kernels.ops.linear import PackedWeight, linear, pack_native

needs_kernel = pytest.mark.skipif(
    not linear_f32.available(),
    reason="no fp32 C linear kernel here: " + (native.unavailable_reason() or "no AVX2 + FMA"),
)


def _assert_rounded(got, x, w, b) -> None:
    """``got`` is ``x @ w.T + b`` up to fp32 rounding in any order of summation: each
    error within 8 sqrt(K) units of rounding of the sum of the terms' magnitudes (a
    random walk of K roundings); one term lost or doubled is far outside that."""
    ref = F.linear(x.double(), w.double(), None if b is None else b.double())
    size = F.linear(x.double().abs(), w.double().abs(), None if b is None else b.double().abs())
    bound = 8 * 2.0**-24 * max(x.shape[-1], 1) ** 0.5 * size + 1e-6
    assert got.shape == ref.shape and got.dtype == torch.float32
    err = (got.double() - ref).abs()
    worst = int(err.argmax()) if err.numel() else 0
    assert bool((err <= bound).all()), (
        f"max error {err.max():.3g}, bound there {bound.flatten()[worst]:.3g}"
    )


@needs_kernel
@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(0, 300),
    k=st.one_of(st.integers(1, 130), st.integers(700, 1800)),  # K in one chunk, or several
    n=st.integers(1, 100),
    bias=st.booleans(),
    strided=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
@example(m=7, k=1, n=1, bias=True, strided=False, seed=0)  # one tile's tail, K = N = 1
@example(m=137, k=64, n=33, bias=False, strided=True, seed=1)  # two row blocks + a tail
@example(m=1, k=1537, n=17, bias=True, strided=False, seed=2)  # decode: 3 chunks of K
@example(m=7, k=769, n=50, bias=True, strided=True, seed=3)  # just past decode's rows
@example(m=200, k=1543, n=48, bias=False, strided=False, seed=4)  # blocks of rows x chunks
def test_matches_reference(m, k, n, bias, strided, seed) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, 2 * k, generator=g)
    x = x[:, ::2] if strided else x[:, :k]  # not contiguous either way
    w = torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    packed = pack_native(w)
    assert isinstance(packed, PackedF32) and packed.panels.shape == (-(-n // 32) * 2, k, 16)
    _assert_rounded(linear(x, w, b, packed), x, w, b)


@needs_kernel
@pytest.mark.parametrize("m", range(1, 9))
def test_decode_rows(m) -> None:
    """Each row count a decode step takes (its own tile), K odd, N not a multiple of 16,
    with and without the bias."""
    g = torch.Generator().manual_seed(m)
    x, w = torch.randn(m, 579, generator=g), torch.randn(71, 579, generator=g)
    packed = pack_native(w)
    for bias in (None, torch.randn(71, generator=g)):
        _assert_rounded(linear(x, w, bias, packed), x, w, bias)


@needs_kernel
def test_leading_dims_and_a_large_step() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 400, 96, generator=g)  # 1200 rows: ten row blocks of 128
    w, b = torch.randn(70, 96, generator=g), torch.randn(70, generator=g)
    got = linear(x, w, b, pack_native(w))
    assert got.shape == (3, 400, 70)
    _assert_rounded(got, x, w, b)


@needs_kernel
def test_no_inputs() -> None:
    """K = 0: every output is its bias (the kernel declines, F.linear answers)."""
    x, w, b = torch.randn(3, 0), torch.randn(5, 0), torch.randn(5)
    torch.testing.assert_close(linear(x, w, b, pack_native(w)), b.expand(3, 5))


@needs_kernel
def test_packed_weight_follows_the_kernel_and_the_weight() -> None:
    w, x = torch.randn(40, 24), torch.randn(5, 24)
    pack = PackedWeight()
    native_copy = pack.get(w, "native")
    assert isinstance(native_copy, PackedF32) and pack.holds(w, "native")
    onednn_copy = pack.get(w, "onednn")
    assert not isinstance(onednn_copy, PackedF32) and not pack.holds(w, "native")
    with torch.no_grad():
        w.mul_(-1.0)  # load_weights copies into the parameter: packed again
    again = pack.get(w, "native")
    assert again is not native_copy
    torch.testing.assert_close(linear(x, w, None, again), F.linear(x, w), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="kernel must be one of native, onednn"):
        pack.get(w, "mkl")


def test_the_plain_path_where_the_kernel_cannot_run() -> None:
    w = torch.randn(6, 8)
    packed = pack_native(w)
    if packed is None:  # no compiler, no AVX-512 or AVX2: nothing packed, F.linear everywhere
        assert not linear_f32.available()
        return
    x64 = torch.randn(2, 8, dtype=torch.float64)
    with pytest.raises(RuntimeError):  # F.linear's own dtype error, not a wrong answer
        linear(x64, w, None, packed)
    assert pack_native(w.double()) is None and pack_native(w.bfloat16()) is None
    wg, xg = w.clone().requires_grad_(), torch.randn(3, 8, requires_grad=True)
    linear(xg, wg, None, packed).sum().backward()  # the packed copy has no autograd
    torch.testing.assert_close(xg.grad, w.sum(0).expand(3, 8))


@needs_kernel
@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 19), k=st.integers(1, 300), n=st.integers(1, 70), seed=st.integers(0, 99))
def test_a_row_is_the_same_in_any_batch(m, k, n, seed) -> None:
    """A row of x gets the same sums, bit for bit, whatever tile it is in (AVX-512: a full
    8-row tile, the tail's smaller one, decode's four-panel tile for one to three rows, N
    past 64 giving a four-panel unit and a lone pair; AVX2: see the build below), so a
    step's tokens do not depend on how its rows were batched."""
    g = torch.Generator().manual_seed(seed)
    x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n)
    packed = pack_native(w)
    got = linear(x, w, b, packed)
    alone = torch.cat([linear(x[i : i + 1], w, b, packed) for i in range(m)])
    assert torch.equal(got, alone)


@needs_kernel
def test_pack_on_its_own_map_matches_reference() -> None:
    """A weight over one huge page is packed into a map of its own (``memory.mapped_zeros``),
    a strided weight and a part-filled last panel included."""
    g = torch.Generator().manual_seed(5)
    w = torch.randn(2 * 1009, 700, generator=g)[::2]  # [1009, 700]: 2.8 MB, not contiguous
    x = torch.randn(3, 700, generator=g)
    packed = pack_native(w)
    assert isinstance(packed, PackedF32) and packed.panels.shape == (64, 700, 16)
    assert not packed.panels[63, :, 1:].any()  # past N: zeros
    _assert_rounded(linear_f32.linear(x, packed, None), x, w, None)


@pytest.fixture(scope="module")
def avx2_build(tmp_path_factory):
    """``linear_f32.c`` built without AVX-512: the AVX2 + FMA kernel that machines without
    AVX-512 take (this machine would take the AVX-512 one)."""
    if platform.machine() not in ("x86_64", "AMD64") or not _has("avx2") or not _has("fma"):
        pytest.skip("needs an x86 CPU with AVX2 and FMA")
    from tandem.kernels.native import builder, contract

    out = tmp_path_factory.mktemp("avx2") / "linear_f32_avx2.so"
    source = Path(builder.__file__).parent / "linear_f32.c"
    flags = [*builder.FLAGS, *builder.CONTRACT_FLAGS, "-mno-avx512f"]
    subprocess.run(
        [builder.find_compiler(), *flags, str(source), "-o", str(out)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    names = ("tandem_linear_f32", "tandem_linear_f32_available")
    return contract.bind(ctypes.CDLL(str(out)), names)


def _has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return f" {flag} " in f.read()
    except OSError:
        return False


def _avx2_linear(lib, x, packed: PackedF32, b) -> torch.Tensor:
    out = torch.empty(x.shape[0], packed.n)
    bias = None if b is None else b.data_ptr()
    done = lib.tandem_linear_f32(
        x.data_ptr(), x.shape[0], packed.k, packed.panels.data_ptr(), bias, packed.n,
        out.data_ptr(),
    )  # fmt: skip
    assert done == 0
    return out


@needs_kernel
@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(1, 300, 200), (1, 1537, 70), (1, 64, 16), (2, 800, 50), (3, 50, 130), (5, 100, 33),
     (9, 1600, 97), (13, 200, 70), (14, 300, 40), (15, 64, 100), (70, 200, 40)],
)  # fmt: skip
def test_avx2_build_matches_reference(avx2_build, m, k, n) -> None:
    """Decode's rows against panels side by side (N past 64: whole groups and lone panels;
    K past one chunk), the 4..6-row tiles, and prefill's blocks with tails of 1..3 rows."""
    assert avx2_build.tandem_linear_f32_available() == 1
    g = torch.Generator().manual_seed(m * 7 + n)
    x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n)
    _assert_rounded(_avx2_linear(avx2_build, x, pack_native(w), b), x, w, b)


@needs_kernel
@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 19), k=st.integers(1, 900), n=st.integers(1, 90), seed=st.integers(0, 99))
@example(m=13, k=800, n=70, seed=0)  # a 6-row tile twice, a 1-row tail, two K chunks
def test_avx2_row_is_the_same_in_any_batch(avx2_build, m, k, n, seed) -> None:
    """AVX2: every tile sums each channel over k in order (one row against four panels,
    two or three rows against two, four to six rows against one, prefill's blocks and
    their tails alike), so a row gets the same numbers, bit for bit, alone or in a batch."""
    g = torch.Generator().manual_seed(seed)
    x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n)
    packed = pack_native(w)
    batch = _avx2_linear(avx2_build, x, packed, b)
    alone = torch.cat([_avx2_linear(avx2_build, x[i : i + 1], packed, b) for i in range(m)])
    assert torch.equal(batch, alone)
