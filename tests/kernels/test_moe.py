"""Mixture-of-experts kernels: the grouped experts and the routing against per-token
references, the op's checks, and the grouping itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels import ops, reference
from tandem.kernels.ops.moe import group_by_expert, run_grouped

PROPS = settings(max_examples=40, deadline=None)


def _case(seed: int, tokens: int, experts: int, top_k: int, hidden: int, inter: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=g) * 0.3
    w2 = torch.randn(experts, hidden, inter, generator=g) * 0.3
    logits = torch.randn(tokens, experts, generator=g)
    weights, ids = ops.topk_route(logits, top_k, normalize=True)
    return x, w13, w2, ids, weights


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    tokens=st.integers(0, 24),
    experts=st.integers(1, 9),
    top_k=st.integers(1, 4),
    hidden=st.sampled_from([4, 16, 40]),
    inter=st.sampled_from([3, 8, 32]),
    activation=st.sampled_from(["silu", "gelu_tanh"]),
)
def test_fused_moe_matches_per_token_reference(
    seed, tokens, experts, top_k, hidden, inter, activation
):
    top_k = min(top_k, experts)
    x, w13, w2, ids, weights = _case(seed, tokens, experts, top_k, hidden, inter)
    got = ops.fused_moe(x, w13, w2, ids, weights, activation)
    want = reference.fused_moe(x, w13, w2, ids, weights, activation)
    assert got.shape == x.shape
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    tokens=st.integers(1, 16),
    experts=st.integers(2, 12),
    top_k=st.integers(1, 4),
    normalize=st.booleans(),
    ties=st.integers(0, 3),
)
def test_routing_matches_per_token_reference(seed, tokens, experts, top_k, normalize, ties):
    """Equal scores (some experts' logits copied from others) keep the lowest index first."""
    top_k = min(top_k, experts)
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g)
    for j in range(min(ties, experts - 1)):
        logits[:, j + 1] = logits[:, 0]
    weights, ids = ops.topk_route(logits, top_k, normalize)
    want_w, want_ids = reference.topk_route(logits, top_k, normalize)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int64
    torch.testing.assert_close(weights, want_w, atol=1e-6, rtol=1e-6)
    # among equal scores the set chosen may differ in order, never in value
    for row, want_row, p in zip(ids.tolist(), want_ids.tolist(), logits.softmax(-1)):
        assert sorted(p[row].tolist()) == pytest.approx(sorted(p[want_row].tolist()))


def test_grouping_runs_each_expert_once_over_its_tokens():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]])
    groups = group_by_expert(ids, 4)
    assert groups.counts == [2, 1, 3, 0]
    assert groups.tokens.tolist() == [0, 2, 1, 0, 1, 2]  # expert 0, 1, 2 in token order
    calls = []

    def expert(e, rows):
        calls.append((e, rows.shape[0]))
        return rows * (e + 1)

    x = torch.randn(3, 5)
    out = run_grouped(x, ids, torch.ones(3, 2), 4, expert)
    assert calls == [(0, 2), (1, 1), (2, 3)]
    torch.testing.assert_close(out, torch.stack([x[0] * 4, x[1] * 5, x[2] * 4]))


def test_an_expert_with_no_tokens_is_skipped_and_empty_batches_work():
    x, w13, w2, ids, weights = _case(1, 0, 3, 2, 8, 4)
    assert ops.fused_moe(x, w13, w2, ids, weights).shape == (0, 8)


def test_bad_calls_name_the_argument():
    x, w13, w2, ids, weights = _case(2, 3, 4, 2, 8, 4)
    with pytest.raises(ValueError, match=r"topk_ids must be in \[0, 4\)"):
        ops.fused_moe(x, w13, w2, ids + 3, weights)
    with pytest.raises(ValueError, match="topk_weights must have the shape of topk_ids"):
        ops.fused_moe(x, w13, w2, ids, weights[:, :1])
    with pytest.raises(ValueError, match="activation must be one of silu, gelu_tanh"):
        ops.fused_moe(x, w13, w2, ids, weights, "relu")
    with pytest.raises(ValueError, match=r"w2"):
        ops.fused_moe(x, w13, w2[:, :, :3], ids, weights)


def test_opcheck_fused_moe():
    x, w13, w2, ids, weights = _case(3, 5, 4, 2, 8, 6)
    torch.library.opcheck(
        torch.ops.tandem.torch_fused_moe.default, (x, w13, w2, ids, weights, "silu")
    )


def test_one_expert_is_a_dense_mlp():
    x, w13, w2, ids, weights = _case(4, 6, 1, 1, 16, 8)
    dense = F.linear(F.silu(F.linear(x, w13[0, :8])) * F.linear(x, w13[0, 8:]), w2[0])
    torch.testing.assert_close(ops.fused_moe(x, w13, w2, ids, weights), dense)


@PROPS
@given(
    seed=st.integers(0, 2**31 - 1),
    tokens=st.integers(1, 12),
    shape=st.sampled_from([(8, 2, 1, 2), (8, 4, 2, 3), (16, 4, 2, 4), (6, 3, 3, 2), (4, 1, 1, 4)]),
    normalize=st.booleans(),
    with_bias=st.booleans(),
    scaling=st.sampled_from([1.0, 2.5]),
)
def test_grouped_routing_matches_per_token_reference(
    seed, tokens, shape, normalize, with_bias, scaling
):
    experts, n_group, topk_group, top_k = shape
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g) * 2
    bias = torch.randn(experts, generator=g) * 0.5 if with_bias else None
    args = (top_k, n_group, topk_group, bias, normalize, scaling)
    weights, ids = ops.grouped_route(logits, *args)
    want_w, want_ids = reference.grouped_route(logits, *args)
    # the same experts (any order: topk's own order is not part of the contract)
    order, want_order = ids.sort(dim=-1), want_ids.sort(dim=-1)
    assert torch.equal(order.values, want_order.values)
    torch.testing.assert_close(
        weights.gather(1, order.indices), want_w.gather(1, want_order.indices), atol=1e-6, rtol=1e-6
    )
    size = experts // n_group
    assert all(len({e // size for e in row}) <= topk_group for row in ids.tolist())
