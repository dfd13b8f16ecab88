"""The fused decode step of a layer (rope, K/V write, decode attention): the CPU
backend's one C call against the torch backend's ops in turn, and its validation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import native
from tandem.kernels.backends import get_backend
from tandem.kernels.decode_inputs import AttentionLayer, DecodeStep
from tandem.kernels.ops.decode_step import StepCheck

needs_c = pytest.mark.skipif(native.library() is None, reason="C kernels not built here")


def _step(
    build_case, seed: int, ctx: list[int], heads: int, kv: int, d: int, block: int, pad: bool
):
    """A decode step: qkv rows, positions (the new token's), a rope table, the caches."""
    case = build_case(seed, [1] * len(ctx), ctx, heads, kv, d, block)
    g = torch.Generator().manual_seed(seed + 1)
    qkv = torch.randn((len(ctx), (heads + 2 * kv) * d), generator=g)
    positions = torch.tensor(ctx, dtype=torch.int64)  # the new token sits after its context
    cos_sin = torch.randn((max(ctx) + 4, d), generator=g)
    slots = case.slot_mapping.clone()
    if pad:  # a padding row: nothing written for it
        slots[0] = -1
    return case, qkv, positions, cos_sin, slots


def _inputs(case, positions, cos_sin, slots, heads, kv, window=0, softcap=0.0, tables=None):
    """The layer's settings and the step's tensors, as the backends take them."""
    tables = case.block_tables if tables is None else tables
    step = DecodeStep(positions, cos_sin, slots, case.seq_lens, tables)
    return AttentionLayer((heads, kv), case.scale, window, softcap), step


def _run(backend: str, case, qkv, positions, cos_sin, slots, heads, kv, window, softcap):
    k_cache, v_cache = case.k_cache.clone(), case.v_cache.clone()
    layer, step = _inputs(case, positions, cos_sin, slots, heads, kv, window, softcap)
    out = get_backend(backend).rope_decode(qkv, layer, step, k_cache, v_cache)
    return out, k_cache, v_cache


@needs_c
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    ctx=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    groups=st.sampled_from([(4, 4), (4, 2), (6, 2), (8, 1)]),
    d=st.sampled_from([8, 16, 64, 128]),
    block=st.sampled_from([1, 4, 16]),
    window=st.sampled_from([0, 3]),
    softcap=st.sampled_from([0.0, 5.0]),
    pad=st.booleans(),
)
def test_fused_step_matches_the_ops_in_turn(
    paged_case, seed, ctx, groups, d, block, window, softcap, pad
):
    heads, kv = groups
    step = _step(paged_case, seed, ctx, heads, kv, d, block, pad)
    got, gk, gv = _run("cpu", *step, heads, kv, window, softcap)
    want, wk, wv = _run("torch", *step, heads, kv, window, softcap)
    assert torch.equal(gk, wk) and torch.equal(gv, wv)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    case, qkv, positions, cos_sin, slots = step  # the C call itself took it (no fallback)
    k_cache, v_cache = case.k_cache.clone(), case.v_cache.clone()
    layer, inputs = _inputs(case, positions, cos_sin, slots, heads, kv, window, softcap)
    direct = native.rope_decode(qkv, layer, inputs, k_cache, v_cache)
    assert direct is not None and torch.equal(direct, got)


@needs_c
def test_step_tensors_are_checked_once_and_qkv_every_layer(paged_case):
    case, qkv, positions, cos_sin, slots = _step(paged_case, 3, [5, 9], 4, 2, 16, 4, False)
    backend = get_backend("cpu")
    caches = (case.k_cache, case.v_cache)
    layer, step = _inputs(case, positions, cos_sin, slots, 4, 2)
    backend.rope_decode(qkv, layer, step, *caches)
    with pytest.raises(ValueError, match=r"qkv.shape\[1\] must equal"):
        backend.rope_decode(qkv[:, :-16], layer, step, *caches)
    bad = torch.tensor([5, cos_sin.shape[0]])  # a new positions tensor: checked again
    _, bad_step = _inputs(case, bad, cos_sin, slots, 4, 2)
    with pytest.raises(ValueError, match=r"positions must be in \[0, 13\)"):
        backend.rope_decode(qkv, layer, bad_step, *caches)
    tables = case.block_tables.clone()
    tables[1, 0] = case.k_cache.shape[0]
    _, bad_step = _inputs(case, positions, cos_sin, slots, 4, 2, tables=tables)
    with pytest.raises(ValueError, match="block_tables entries must be in"):
        backend.rope_decode(qkv, layer, bad_step, *caches)
    other = AttentionLayer((4, 2), case.scale, window=-1)  # a new layer: checked again
    with pytest.raises(ValueError, match="window"):
        backend.rope_decode(qkv, other, step, *caches)


def test_step_check_names_the_heads_and_the_inputs(paged_case):
    case, qkv, positions, cos_sin, slots = _step(paged_case, 1, [3], 4, 2, 8, 4, False)
    check = StepCheck()
    caches = (case.k_cache, case.v_cache)
    layer, step = _inputs(case, positions, cos_sin, slots, 4, 3)
    with pytest.raises(ValueError, match=r"q heads \(4\) must be a multiple of k heads \(3\)"):
        check(qkv, layer, step, *caches)
    with pytest.raises(TypeError, match="heads must be a pair"):
        check(qkv, AttentionLayer(4, case.scale), step, *caches)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step must be a DecodeStep, got tuple"):
        check(qkv, layer, step.tensors(), *caches)  # type: ignore[arg-type]
