"""The mixture-of-experts steps in C (``native/moe.c``) against plain torch: the routing's
choice among equals (softmax, and DeepSeek-V3's group-limited sigmoid), the experts'
weighted sum and the gated shared expert's share (the routing is checked against the
per-token reference in test_moe.py), and the cases C leaves to torch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels.native import library
from tandem.kernels.native import moe as native
from tandem.kernels.ops.moe import add_gated, grouped_route, topk_route, weighted_sum

pytestmark = pytest.mark.skipif(library() is None, reason="no C kernels here")
PROPS = settings(max_examples=40, deadline=None)
# (experts, top_k, n_group, topk_group); the last: fewer eligible experts than top_k
GROUPED = [(8, 3, 4, 2), (16, 4, 4, 1), (12, 5, 3, 3), (6, 2, 6, 4), (64, 8, 8, 4), (9, 9, 1, 1)]
GROUPED.append((8, 5, 4, 2))


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


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=st.sampled_from(GROUPED),
    levels=st.integers(1, 4),
    with_bias=st.booleans(),
    normalize=st.booleans(),
)
def test_grouped_routing_chooses_among_equals_as_torch_topk(
    seed, shape, levels, with_bias, normalize
):
    """Logits and biases of a few distinct values (equal scores, equal group worths): the
    groups kept and the experts chosen, in order, are those of the torch code (fp64
    logits: C does not take them), whose choices are torch.topk's."""
    experts, top_k, n_group, topk_group = shape
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(0, levels, (5, experts), generator=g).float() * 2.0
    bias = torch.randint(0, 2, (experts,), generator=g).float() * 0.25 if with_bias else None
    args = (top_k, n_group, topk_group, bias, normalize, 2.5)
    spec = native.RoutingSpec(experts, top_k, normalize, "sigmoid", n_group, topk_group, bias, 2.5)
    got = native.route(logits, spec)
    assert got is not None
    want = grouped_route(logits.double(), *args)  # torch's sigmoid and topk
    assert torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0].float(), atol=1e-6, rtol=1e-6)
    assert torch.equal(grouped_route(logits, *args)[1], got[1])  # the module path's is C's


def test_grouped_routing_reach():
    """What C leaves to torch: groups torch.topk would sort, groups that do not divide
    the experts, a bias of the wrong shape or type."""
    assert native.RoutingSpec(8, 3, True, "sigmoid", 4, 2).reach() is None
    far = native.RoutingSpec(256, 8, True, "sigmoid", 128, 2)
    assert "the 2 best of 128 groups" in far.reach()
    assert native.RoutingSpec(8, 3, True, "sigmoid", 3, 2).reach() is not None
    assert native.RoutingSpec(8, 3, True, "sigmoid", 4, 5).reach() is not None
    assert native.RoutingSpec(8, 3, True, "softmax").reach() is None
    assert native.RoutingSpec(8, 3, True, "relu").reach() == "relu routing"
    bias = torch.zeros(8, dtype=torch.float64)
    assert "score bias" in native.RoutingSpec(8, 3, True, "sigmoid", 4, 2, bias).reach()
    assert native.route(torch.zeros(2, 8), far) is None


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


def test_a_moe_entry_names_what_is_wrong():
    """The decode stack's MoE entry refuses a run of experts outside the routing's, and a
    routing C does not take, naming the field."""
    from tandem.kernels.native.decode_moe import MoeEntry
    from tandem.kernels.native.lin_spec import F32, LinSpec

    lin = LinSpec(F32, (torch.zeros(1),), (), (), None, 4, 4)
    pairs = ((lin, lin),) * 2
    held = MoeEntry(lin, pairs, native.RoutingSpec(8, 2, True), first=6)
    assert held.floats(4) > 0
    with pytest.raises(ValueError, match=r"MoeEntry.first must be in \[0, 6\]"):
        MoeEntry(lin, pairs, native.RoutingSpec(8, 2, True), first=7)
    with pytest.raises(ValueError, match=r"MoeEntry.routing: .* 3 groups of 8 experts"):
        MoeEntry(lin, pairs, native.RoutingSpec(8, 2, True, "sigmoid", 3, 1))
