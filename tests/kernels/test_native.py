"""The C decode kernel and the ``cpu`` backend: reference parity, fallbacks, the build cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import native, reference
from tandem.kernels.backends import available_backends, get_backend
from tandem.kernels.native import builder
from tandem.kernels.ops.linear_int8 import outliers
from tandem.kernels.ops.linear_int8 import quantize_rows as torch_quantize_rows

needs_native = pytest.mark.skipif(
    native.library() is None, reason=f"no native kernels here: {native.unavailable_reason()}"
)


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    seq_lens=st.lists(st.integers(1, 70), min_size=1, max_size=9),
    heads=st.sampled_from([(1, 1), (4, 4), (4, 2), (8, 1), (6, 3), (9, 3), (12, 2)]),
    head_size=st.sampled_from([1, 8, 16, 24, 48, 64, 128, 272]),
    block_size=st.sampled_from([1, 3, 16, 32]),
)
def test_native_decode_matches_reference(paged_case, seed, seq_lens, heads, head_size, block_size):
    case = paged_case(
        seed, [1] * len(seq_lens), [s - 1 for s in seq_lens], *heads, head_size, block_size
    )
    got = native.paged_decode(*case.decode_args())
    assert got is not None and got.shape == case.q.shape
    torch.testing.assert_close(
        got, reference.decode_attention(*case.decode_args()), atol=1e-5, rtol=1e-5
    )


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    lens=st.lists(st.tuples(st.integers(1, 24), st.integers(0, 40)), min_size=1, max_size=6),
    heads=st.sampled_from([(1, 1), (4, 2), (8, 1), (6, 3)]),
    head_size=st.sampled_from([1, 8, 16, 48, 64, 128]),
    block_size=st.sampled_from([1, 4, 16]),
)
def test_native_prefill_matches_reference(paged_case, seed, lens, heads, head_size, block_size):
    """New tokens after cached context (chunked prefill, prefix hits) in shuffled blocks."""
    q_lens, ctx_lens = [n for n, _ in lens], [c for _, c in lens]
    case = paged_case(seed, q_lens, ctx_lens, *heads, head_size, block_size)
    a = case.prefill_args()
    got = native.paged_prefill(case.q, case.k_cache, case.v_cache, *a[5:])
    assert got is not None and got.shape == case.q.shape
    torch.testing.assert_close(got, reference.prefill_attention(*a), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(get_backend("cpu").prefill(*a), got)


@needs_native
def test_prefill_of_another_dtype_falls_back(paged_case):
    case = paged_case(5, [3, 2], [0, 4], 4, 2, 8, 4, dtype=torch.bfloat16)
    a = case.prefill_args()
    assert native.paged_prefill(case.q, case.k_cache, case.v_cache, *a[5:]) is None
    want = reference.prefill_attention(*a)
    torch.testing.assert_close(get_backend("cpu").prefill(*a), want, atol=2e-2, rtol=2e-2)


@needs_native
def test_large_scores_stay_finite(paged_case):
    """Scores far apart (scaled queries of 1e3): the online softmax neither overflows
    nor loses the winning token."""
    case = paged_case(3, [1, 1], [40, 7], 4, 2, 16, 4)
    case.q.mul_(1e3)
    got = native.paged_decode(*case.decode_args())
    assert torch.isfinite(got).all()
    torch.testing.assert_close(
        got, reference.decode_attention(*case.decode_args()), atol=1e-4, rtol=1e-4
    )


@needs_native
def test_empty_batch(paged_case):
    case = paged_case(1, [1], [3], 4, 2, 8, 4)
    q = case.q[:0]
    out = native.paged_decode(
        q, case.k_cache, case.v_cache, case.seq_lens[:0], case.block_tables[:0], 0.5
    )
    assert out is not None and out.shape == (0, 4, 8)


@needs_native
@pytest.mark.parametrize("what", ["bfloat16", "strided_cache", "huge_heads"])
def test_calls_c_cannot_take_answer_none_and_the_backend_falls_back(paged_case, what):
    if what == "huge_heads":  # H * D beyond the kernel's stack bound
        case = paged_case(2, [1, 1], [5, 9], 64, 1, 512, 4)
    else:
        dtype = torch.bfloat16 if what == "bfloat16" else torch.float32
        case = paged_case(2, [1, 1], [5, 9], 4, 2, 8, 4, dtype=dtype)
    args = list(case.decode_args())
    if what == "strided_cache":
        args[1] = torch.cat([args[1], args[1]], dim=-1)[..., ::2]  # same values, strided
        args[2] = torch.cat([args[2], args[2]], dim=-1)[..., ::2]
    assert native.paged_decode(*args) is None
    got = get_backend("cpu").decode(*args)
    tol = 2e-2 if what == "bfloat16" else 1e-5
    torch.testing.assert_close(got, reference.decode_attention(*args), atol=tol, rtol=tol)


@needs_native
def test_cpu_backend_validates_before_calling_c(paged_case):
    case = paged_case(4, [1], [6], 4, 2, 8, 4)
    tables = case.block_tables.clone()
    tables[0, 0] = case.k_cache.shape[0]  # one past the last block: C would read outside
    with pytest.raises(ValueError, match=r"block_tables entries must be in \[0, "):
        get_backend("cpu").decode(case.q, case.k_cache, case.v_cache, case.seq_lens, tables, 0.5)


def test_cpu_backend_is_listed_when_the_library_loads():
    assert ("cpu" in available_backends()) == (native.library() is not None)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )


@needs_native
def test_build_is_cached_per_content(tmp_path):
    code = """
        import time
        from tandem.kernels.native import builder, library
        assert library() is not None
        print(builder.build())
    """
    first = _run(code, TANDEM_CACHE_DIR=str(tmp_path))
    assert first.returncode == 0, first.stderr
    path = first.stdout.strip()
    assert path.startswith(str(tmp_path / "native")) and os.path.exists(path)
    mtime = os.stat(path).st_mtime_ns
    second = _run(code, TANDEM_CACHE_DIR=str(tmp_path))
    assert second.stdout.strip() == path and os.stat(path).st_mtime_ns == mtime  # reused
    assert [p.suffix for p in (tmp_path / "native").iterdir()] == [".so"]  # no temp files


def test_no_compiler_means_no_native_kernels(tmp_path):
    code = """
        from tandem.kernels import native
        from tandem.kernels.backends import available_backends
        assert native.library() is None
        print(native.unavailable_reason())
        assert "cpu" not in available_backends()
    """
    proc = _run(code, TANDEM_CACHE_DIR=str(tmp_path), CC="", PATH=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "no C compiler found" in proc.stdout


def test_compiler_errors_are_reported(tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'fatal: this compiler refuses' >&2\nexit 1\n")
    fake.chmod(0o755)
    proc = _run(
        "from tandem.kernels import native\nprint(native.library(), native.unavailable_reason())",
        TANDEM_CACHE_DIR=str(tmp_path / "cache"),
        CC=str(fake),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("None") and "this compiler refuses" in proc.stdout
    assert not list((tmp_path / "cache" / "native").glob("*"))  # the temp file is gone


def test_library_path_depends_on_the_flags(monkeypatch):
    compiler = sys.executable  # any existing file stands in for the compiler here
    before = builder.library_path(compiler)
    monkeypatch.setattr(builder, "FLAGS", (*builder.FLAGS, "-DSOMETHING"))
    assert builder.library_path(compiler) != before


# ------------------------------------------------------------------ row kernels in C


@needs_native
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(0, 40),
    width=st.integers(1, 300),
    with_residual=st.booleans(),
)
def test_native_add_rms_norm_matches_reference(seed, rows, width, with_residual):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, width), generator=g) * 3
    w = torch.randn(width, generator=g)
    r = torch.randn((rows, width), generator=g) if with_residual else None
    out, summed = native.add_rms_norm(x, r, w, 1e-5)
    want_sum = x if r is None else x + r
    torch.testing.assert_close(summed, want_sum)
    torch.testing.assert_close(out, reference.rms_norm(want_sum, w, 1e-5), atol=1e-5, rtol=1e-5)


@needs_native
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(0, 40), inner=st.integers(1, 200))
def test_native_silu_and_mul_matches_reference(seed, rows, inner):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, 2 * inner), generator=g) * 4
    got = native.silu_and_mul(x)
    torch.testing.assert_close(got, reference.silu_and_mul(x), atol=1e-5, rtol=1e-5)


@needs_native
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(0, 40), inner=st.integers(1, 200))
def test_native_gelu_tanh_and_mul_matches_reference(seed, rows, inner):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, 2 * inner), generator=g) * 4
    got = native.gelu_tanh_and_mul(x)
    torch.testing.assert_close(got, reference.gelu_tanh_and_mul(x), atol=1e-5, rtol=1e-5)


@needs_native
def test_native_gelu_tanh_saturates_without_overflow():
    x = torch.tensor([[-1e30, -1e4, -9.0, 0.0, 1e-4, 9.0, 1e4, 1e30, *[2.0] * 8]])
    got = native.gelu_tanh_and_mul(x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, F.gelu(x[:, :8], approximate="tanh") * 2.0)


@needs_native
def test_native_silu_saturates_without_overflow():
    x = torch.tensor([[-1e4, -90.0, 0.0, 90.0, 1e4, 2.0, 2.0, 2.0, 2.0, 2.0]])
    got = native.silu_and_mul(x)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, reference.silu_and_mul(x))


@needs_native
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    tokens=st.integers(1, 12),
    heads=st.integers(1, 6),
    half=st.integers(1, 40),
    extra=st.integers(0, 70),
)
def test_native_rotary_reads_strided_rows(seed, tokens, heads, half, extra):
    """q as a view into a wider fused projection row (stride > H * D), as the model has it."""
    g = torch.Generator().manual_seed(seed)
    d = 2 * half
    wide = torch.randn((tokens, heads * d + extra), generator=g)
    x = wide[:, : heads * d].reshape(tokens, heads, d)
    table = torch.randn((50, d), generator=g)
    pos = torch.randint(0, 50, (tokens,), generator=g)
    got = native.rotary(pos, x, table)
    assert got is not None and got.is_contiguous()
    want, _ = reference.rotary_embedding(pos, x.contiguous(), x.contiguous(), table)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@needs_native
def test_row_kernels_refuse_what_they_cannot_read():
    x = torch.randn(4, 8)
    assert native.add_rms_norm(x.double(), None, torch.ones(8).double(), 1e-5) is None
    assert native.add_rms_norm(x.t(), None, torch.ones(4), 1e-5) is None  # strided rows
    assert native.silu_and_mul(x.to(torch.bfloat16)) is None
    odd = torch.randn(3, 2, 8)[:, :, ::2]  # heads not contiguous
    assert native.rotary(torch.zeros(3, dtype=torch.long), odd, torch.randn(5, 4)) is None


@needs_native
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    tokens=st.integers(0, 20),
    kv_heads=st.integers(1, 3),
    head_size=st.sampled_from([1, 4, 64]),
    extra=st.integers(0, 9),
)
def test_native_write_kv_reads_strided_rows(seed, tokens, kv_heads, head_size, extra):
    """k and v as views into a wider projection (as in the model), some slots padding."""
    g = torch.Generator().manual_seed(seed)
    blocks, block_size = 6, 4
    tokens = min(tokens, blocks * block_size)
    row = kv_heads * head_size
    wide = torch.randn((tokens, 2 * row + extra), generator=g)
    k = wide[:, :row].view(tokens, kv_heads, head_size)
    v = wide[:, row + extra : 2 * row + extra].view(tokens, kv_heads, head_size)
    slots = torch.randperm(blocks * block_size, generator=g)[:tokens]
    slots[torch.rand(tokens, generator=g) < 0.25] = -1
    caches = [torch.randn((blocks, block_size, kv_heads, head_size), generator=g) for _ in "kv"]
    want = [c.clone() for c in caches]
    assert native.write_kv(k, v, caches[0], caches[1], slots)
    reference.write_kv_cache(k, v, want[0], want[1], slots)
    assert torch.equal(caches[0], want[0]) and torch.equal(caches[1], want[1])


@needs_native
@pytest.mark.parametrize("what", ["bfloat16", "strided_cache", "strided_heads"])
def test_write_kv_calls_c_cannot_take_write_nothing(what):
    k = torch.randn(3, 2, 4)
    cache = torch.zeros(2, 4, 2, 4)
    caches = [cache.clone(), cache.clone()]
    if what == "bfloat16":
        k = k.to(torch.bfloat16)
    elif what == "strided_cache":
        caches = [torch.zeros(2, 4, 2, 8)[..., ::2] for _ in "kv"]
    else:
        k = torch.randn(3, 4, 4)[:, ::2]  # heads 8 floats apart, not 4
    assert not native.write_kv(k, k, caches[0], caches[1], torch.tensor([0, 5, -1]))
    assert all(int(c.count_nonzero()) == 0 for c in caches)


def _torch_greedy(x):
    tokens = x.argmax(dim=-1)
    return tokens, x.gather(1, tokens[:, None]).squeeze(1) - x.logsumexp(dim=-1)


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(0, 9),
    vocab=st.integers(1, 3000),
    scale=st.sampled_from([0.1, 3.0, 40.0]),
    ties=st.booleans(),
)
def test_native_greedy_matches_argmax_and_log_softmax(seed, rows, vocab, scale, ties):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, vocab), generator=g) * scale
    if ties:
        x = x.round()  # many equal maxima: the first one wins, as in torch.argmax
    got = native.greedy(x)
    assert got is not None
    want = _torch_greedy(x)
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)


@needs_native
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "all -inf"])
def test_greedy_rows_that_are_not_finite_take_the_torch_path(bad):
    from tandem.kernels.sampling import greedy_with_logprob

    x = torch.randn(3, 50)
    if bad == "all -inf":
        x[1] = float("-inf")
    else:
        x[1, 7] = bad
    assert native.greedy(x) is None
    tokens, lps = greedy_with_logprob(x)
    want_t, want_lp = _torch_greedy(x)
    assert torch.equal(tokens, want_t)
    torch.testing.assert_close(lps, want_lp, equal_nan=True)


@needs_native
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 40),
    width=st.integers(1, 300),
    spikes=st.integers(0, 3),
    shift=st.sampled_from([0.0, 0.7, -3.0]),
)
def test_native_quantize_rows_matches_torch(seed, rows, width, spikes, shift):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, width), generator=g) + shift  # rows leaning to one side too
    for i in range(spikes):  # outliers, as LLM activations have a few
        x[i % rows, (7 * i) % width] = 40.0 + i
    got = native.quantize_rows(x, 8.0)
    assert got is not None
    q, scale, zero, bound = torch_quantize_rows(x, 8.0)
    torch.testing.assert_close(got[3], bound)
    outlier = outliers(x, got[3])  # [M, K]: the entries C left out
    assert got[4] == int(outlier.sum())
    assert torch.equal(outlier, outliers(x, bound)) or width == 1  # a bound-equal edge
    torch.testing.assert_close(got[1], scale)
    # round-half cases may land one step apart (x * (1/s) vs x / s)
    assert int((got[2] - zero).abs().max()) <= 1
    assert int((got[0].int() - q.int()).abs().max()) <= 1
    # what the bytes stand for: x to within half a step, exactly 0 at the outliers
    back = (got[0].float() - got[2][:, None].float()) * got[1][:, None]
    kept = x.masked_fill(outlier, 0.0)
    assert float((back - kept).abs().max()) <= float(got[1].max()) * 1.01
    assert not back[outlier].any()
    if width >= 256 and shift == 0.0:  # then a spike is past 8 rms of its row (~4.6 at most)
        assert int(outlier.sum()) >= spikes


@needs_native
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 30),
    cols=st.integers(1, 200),
    with_bias=st.booleans(),
)
def test_native_rescale_matches_torch(seed, rows, cols, with_bias):
    g = torch.Generator().manual_seed(seed)
    acc = torch.randint(-(2**20), 2**20, (rows, cols), generator=g, dtype=torch.int32)
    zero = torch.randint(-128, 128, (rows,), generator=g, dtype=torch.int32)
    col_sum = torch.randint(-5000, 5000, (cols,), generator=g, dtype=torch.int32)
    rs, cs = torch.rand(rows, generator=g), torch.rand(cols, generator=g)
    bias = torch.randn(cols, generator=g) if with_bias else None
    want = (acc - zero[:, None] * col_sum[None, :]).float() * rs[:, None] * cs[None, :]
    if bias is not None:
        want = want + bias
    torch.testing.assert_close(native.rescale(acc, zero, col_sum, rs, cs, bias), want)


@needs_native
def test_int8_row_kernels_refuse_what_they_cannot_read():
    assert native.quantize_rows(torch.randn(4, 6).t(), 6.0) is None  # strided
    assert native.quantize_rows(torch.randn(4, 6, dtype=torch.float64), 6.0) is None
    acc = torch.zeros(3, 4, dtype=torch.int64)
    zero, col_sum = torch.zeros(3, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    assert native.rescale(acc, zero, col_sum, torch.ones(3), torch.ones(4), None) is None
