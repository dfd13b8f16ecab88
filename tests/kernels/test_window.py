"""Sliding windows and soft-capped scores: every attention kernel against the reference.

The window also has to hold where a cache manager hands the blocks wholly before it to
another sequence: spoiling those blocks must not change any kernel's answer.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import native, ops, reference
from tandem.kernels.backends import available_backends, get_backend

HEADS = st.sampled_from([(4, 4), (4, 2), (6, 3), (8, 1)])
WINDOWS = st.integers(0, 20)  # 0: none
CAPS = st.sampled_from([0.0, 0.0, 5.0, 50.0])  # 5: most scores are capped hard
PROPS = settings(max_examples=40, deadline=None)
needs_native = pytest.mark.skipif(native.library() is None, reason="no native kernels here")


def _prefill_case(paged_case, seed, lens, heads, head_size, block_size):
    q_lens, ctx_lens = [n for n, _ in lens], [c for _, c in lens]
    return paged_case(seed, q_lens, ctx_lens, *heads, head_size, block_size)


def _decode_case(paged_case, seed, seq_lens, heads, head_size, block_size):
    ones = [1] * len(seq_lens)
    return paged_case(seed, ones, [s - 1 for s in seq_lens], *heads, head_size, block_size)


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    lens=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 30)), min_size=1, max_size=4),
    heads=HEADS,
    head_size=st.sampled_from([8, 16, 64]),
    block_size=st.sampled_from([1, 4, 16]),
    window=WINDOWS,
    softcap=CAPS,
)
def test_prefill_kernels_match_reference(
    paged_case, seed, lens, heads, head_size, block_size, window, softcap
):
    case = _prefill_case(paged_case, seed, lens, heads, head_size, block_size)
    args = (*case.prefill_args(), window, softcap)
    want = reference.prefill_attention(*args)
    torch.testing.assert_close(ops.prefill_attention(*args), want, atol=1e-5, rtol=1e-5)
    if native.library() is not None:
        got = native.paged_prefill(case.q, case.k_cache, case.v_cache, *args[5:])
        assert got is not None
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    seq_lens=st.lists(st.integers(1, 60), min_size=1, max_size=10),
    heads=HEADS,
    head_size=st.sampled_from([8, 16, 64, 128]),
    block_size=st.sampled_from([1, 3, 16]),
    window=WINDOWS,
    softcap=CAPS,
)
def test_decode_kernels_match_reference(
    paged_case, seed, seq_lens, heads, head_size, block_size, window, softcap
):
    case = _decode_case(paged_case, seed, seq_lens, heads, head_size, block_size)
    args = (*case.decode_args(), window, softcap)
    want = reference.decode_attention(*args)
    torch.testing.assert_close(ops.decode_attention(*args), want, atol=1e-5, rtol=1e-5)
    if native.library() is not None:
        got = native.paged_decode(*args)
        assert got is not None
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _spoil_before_window(case, window: int, first_query: list[int]) -> None:
    """Fill every block that lies wholly before each sequence's window with garbage."""
    S = case.k_cache.shape[1]
    for b, pos in enumerate(first_query):
        start = max(0, pos - window + 1)  # the first key the earliest query sees
        for j in range(start // S):
            block = int(case.block_tables[b, j])
            case.k_cache[block] = 1e4
            case.v_cache[block] = -1e4


@pytest.mark.parametrize("name", [n for n in ("torch", "cpu") if n in available_backends()])
def test_blocks_before_the_window_are_never_needed(paged_case, name):
    backend = get_backend(name)
    window = 5
    dec = paged_case(11, [1, 1, 1], [30, 3, 17], 4, 2, 16, 4)
    args = (*dec.decode_args(), window, 0.0)
    want = reference.decode_attention(*args)
    _spoil_before_window(dec, window, [int(n) - 1 for n in dec.seq_lens])
    dargs = dec.decode_args()
    torch.testing.assert_close(backend.decode(*dargs, window=window), want, atol=1e-5, rtol=1e-5)

    pre = paged_case(12, [3, 6], [25, 14], 4, 2, 16, 4)
    args = (*pre.prefill_args(), window, 0.0)
    want = reference.prefill_attention(*args)
    q_lens = [3, 6]
    _spoil_before_window(pre, window, [int(n) - q for n, q in zip(pre.seq_lens, q_lens)])
    got = backend.prefill(*pre.prefill_args(), window=window)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _point_at_null(case, window: int, first_query: list[int], fill: float) -> None:
    """What the KV managers do: table entries wholly before each sequence's window point
    at one block past the others (the null block), filled with ``fill``."""
    S = case.k_cache.shape[1]
    null = case.k_cache.shape[0]
    pad = torch.full((1, *case.k_cache.shape[1:]), fill, dtype=case.k_cache.dtype)
    case.k_cache = torch.cat([case.k_cache, pad])
    case.v_cache = torch.cat([case.v_cache, pad])
    tables = case.block_tables.clone()
    for b, pos in enumerate(first_query):
        tables[b, : max(0, pos - window + 1) // S] = null
    case.block_tables = tables


@pytest.mark.parametrize("name", [n for n in ("torch", "cpu") if n in available_backends()])
def test_tables_pointing_at_the_null_block_before_the_window(paged_case, name):
    """The C kernels and the torch prefill never read the null block; the torch decode
    gathers it and masks it, which a zeroed block (the KV managers' null block is never
    written) leaves exact, while NaNs there would leak through the masked product."""
    backend = get_backend(name)
    window = 5
    dec = paged_case(21, [1, 1, 1], [30, 3, 17], 4, 2, 16, 4)
    want = reference.decode_attention(*dec.decode_args(), window, 0.0)
    _point_at_null(dec, window, [int(n) - 1 for n in dec.seq_lens], 0.0)
    got = backend.decode(*dec.decode_args(), window=window)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    if name == "cpu" and native.library() is not None:  # C never reads it, NaN or not
        dec.k_cache[-1] = dec.v_cache[-1] = float("nan")
        got = native.paged_decode(*dec.decode_args(), window, 0.0)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)

    q_lens = [3, 6]
    pre = paged_case(22, q_lens, [25, 14], 4, 2, 16, 4)
    want = reference.prefill_attention(*pre.prefill_args(), window, 0.0)
    firsts = [int(n) - q for n, q in zip(pre.seq_lens, q_lens)]
    _point_at_null(pre, window, firsts, float("nan"))  # prefill never reads it either
    got = backend.prefill(*pre.prefill_args(), window=window)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_window_and_softcap_are_checked(paged_case):
    case = paged_case(1, [1], [3], 4, 2, 8, 4)
    with pytest.raises(ValueError, match=r"window must be an int >= 0 \(0: no sliding window\)"):
        ops.decode_attention(*case.decode_args(), -1)
    with pytest.raises(ValueError, match=r"softcap must be a number >= 0"):
        ops.prefill_attention(*case.prefill_args(), 0, -2.0)


def test_a_window_past_the_sequence_is_no_window(paged_case):
    case = paged_case(2, [4, 2], [5, 0], 4, 2, 8, 4)
    full = ops.prefill_attention(*case.prefill_args())
    torch.testing.assert_close(ops.prefill_attention(*case.prefill_args(), 100), full)


def _on_gpu(args: tuple, idx: list[int]) -> tuple[list, list]:
    """(the chosen args on CUDA, floats in fp16; the same for the reference on the CPU)."""
    dev, ref = [], []
    for t in (args[i] for i in idx):
        dev.append(t.cuda().half() if t.is_floating_point() else t.cuda())
        ref.append(t.half().float() if t.is_floating_point() else t)
    return dev, ref


@pytest.mark.gpu
@pytest.mark.skipif("flash_attn" not in available_backends(), reason="needs CUDA and flash-attn")
def test_flash_attn_window_and_softcap(paged_case):
    backend = get_backend("flash_attn")
    for window, softcap in ((300, 0.0), (0, 30.0), (257, 20.0)):
        case = paged_case(7, [5, 300, 1], [0, 400, 600], 8, 2, 64, 256, strided_tables=False)
        dev, ref = _on_gpu(case.prefill_args(), list(range(8)))
        got = backend.prefill(*dev, case.scale, window=window, softcap=softcap).float().cpu()
        want = reference.prefill_attention(*ref, case.scale, window, softcap)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
        dec = paged_case(8, [1, 1, 1], [0, 17, 700], 8, 2, 64, 256, strided_tables=False)
        dev, ref = _on_gpu(dec.prefill_args(), [0, 3, 4, 6, 7])  # q, caches, lens, tables
        got = backend.decode(*dev, dec.scale, window=window, softcap=softcap).float().cpu()
        want = reference.decode_attention(*ref, dec.scale, window, softcap)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
