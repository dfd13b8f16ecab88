"""The mixture-of-experts steps in C (``native/moe.c``) against plain torch: the experts'
weighted sum and the gated shared expert's share (the routing is checked against the
per-token reference in test_moe.py), and the cases C leaves to torch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels.native import library
from tandem.kernels.native import moe as native
from tandem.kernels.ops.moe import add_gated, topk_route, weighted_sum

pytestmark = pytest.mark.skipif(library() is None, reason="no C kernels here")
PROPS = settings(max_examples=40, deadline=None)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    experts=st.integers(1, 70),
    top_k=st.integers(1, 17),
    levels=st.integers(1, 4),
)
def test_routing_chooses_among_equals_as_torch_topk(seed, experts, top_k, levels):
    """Logits of a few distinct values (many equal probabilities): the experts chosen, in
    order, are torch.topk's (what transformers routes by), where C takes the call."""
    top_k = min(top_k, experts)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (3, experts), generator=g).float() * 2.0
    got = native.route(logits, native.RoutingSpec(experts, top_k, False))
    if not native.routes(experts, top_k):
        assert got is None
        return
    assert got is not None
    want = torch.topk(logits.softmax(dim=-1), top_k, dim=-1)
    assert torch.equal(got[1], want.indices)
    torch.testing.assert_close(got[0], want.values, atol=1e-6, rtol=1e-6)


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    tokens=st.integers(1, 12),
    top_k=st.integers(1, 8),
    hidden=st.sampled_from([1, 7, 64, 130]),
)
def test_weighted_sum_matches_torch(seed, tokens, top_k, hidden):
    g = torch.Generator().manual_seed(seed)
    done = torch.randn(tokens, top_k, hidden, generator=g)
    weights = torch.rand(tokens, top_k, generator=g)
    got = native.weighted_sum(done, weights)
    assert got is not None
    want = (done.double() * weights.double()[..., None]).sum(dim=1).float()
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    tokens=st.integers(1, 12),
    hidden=st.sampled_from([1, 7, 64]),
    scale=st.sampled_from([0.1, 3.0, 40.0]),
)
def test_gated_share_matches_torch(seed, tokens, hidden, scale):
    g = torch.Generator().manual_seed(seed)
    out, shared = torch.randn(2, tokens, hidden, generator=g)
    gate = torch.randn(tokens, 1, generator=g) * scale
    want = out.double() + shared.double() * torch.sigmoid(gate.double())
    got = add_gated(out.clone(), shared, gate)
    torch.testing.assert_close(got, want.float(), atol=1e-6, rtol=1e-5)


def test_c_takes_fp32_on_the_cpu_only():
    logits = torch.randn(3, 6, dtype=torch.float64)
    assert native.route(logits, native.RoutingSpec(6, 2, True)) is None  # torch, in fp32
    weights, ids = topk_route(logits, 2, True)
    assert weights.dtype == torch.float32 and ids.shape == (3, 2)
    beyond = native.RoutingSpec(6, 7, True)  # more experts than there are
    assert native.route(logits.float(), beyond) is None
    pairs = torch.randn(3, 2, 4, dtype=torch.bfloat16)
    assert native.weighted_sum(pairs, torch.rand(3, 2)) is None
    assert weighted_sum(pairs, torch.rand(3, 2)).dtype == torch.float32
    assert native.gate_add(torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(2, 1)) is None
