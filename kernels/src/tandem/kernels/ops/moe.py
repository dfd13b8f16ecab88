"""Mixture of experts: routing, and the experts run as one matmul pair per expert.

A step's (token, expert) pairs are sorted by expert, so each expert multiplies all of
its tokens at once ([n, C] x [C, 2I], then [n, I] x [I, C]) instead of one token at a
time; each pair's output, weighted by its routing weight, is added back to its token.
:func:`run_grouped` is that loop with the matmuls left to the caller (the model layer
runs them on packed or int8 weights); ``tandem::torch_fused_moe`` is the op over plain
stacked weights, with ``F.linear`` per expert.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.native import moe as native
from tandem.kernels.ops.activation import gelu_tanh_and_mul, silu_and_mul
from tandem.kernels.ops.library import call, define

ACTIVATIONS = ("silu", "gelu_tanh")
SCORINGS = ("softmax", "sigmoid")


@dataclass(frozen=True, slots=True)
class Groups:
    """A step's (token, expert) pairs sorted by expert."""

    order: Tensor  # [T*K] int64: pair index (token * K + slot) in expert order
    back: Tensor  # [T*K] int64: where each pair (in token order) sits in expert order
    tokens: Tensor  # [T*K] int64: the token of each sorted pair
    counts: list[int]  # [E] pairs per expert


def group_by_expert(topk_ids: Tensor, num_experts: int) -> Groups:
    # topk_ids: [T, K] int64 -> pairs grouped by expert (stable: token order within one)
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts).tolist()
    return Groups(order, torch.argsort(order), order // topk_ids.shape[1], counts)


def run_grouped(
    x: Tensor,
    topk_ids: Tensor,
    topk_weights: Tensor,
    num_experts: int,
    expert: Callable[[int, Tensor], Tensor],
) -> Tensor:
    """sum over k of topk_weights[t, k] * expert(topk_ids[t, k], x[t]), one call per expert.

    x: [T, C]; topk_ids, topk_weights: [T, K]; ``expert(e, rows)``: [n, C] -> [n, C].
    One token (a single stream's decode) skips the grouping: its K experts run in turn.
    """
    if x.shape[0] == 1:
        done = torch.cat([expert(e, x) for e in topk_ids[0].tolist()])  # [K, C]
        return weighted_sum(done[None], topk_weights).to(x.dtype)
    groups = group_by_expert(topk_ids, num_experts)
    rows = x.index_select(0, groups.tokens)  # [T*K, C] grouped by expert
    done = torch.empty_like(rows)
    start = 0
    for e, n in enumerate(groups.counts):
        if n:
            done[start : start + n] = expert(e, rows[start : start + n])
            start += n
    # back to token order, then each token's K outputs weighted and summed (a gather and a
    # sum: index_add_ with repeated indices costs ~0.1-0.7 ms even for a few rows on CPU)
    pairs = done.index_select(0, groups.back).view(*topk_ids.shape, x.shape[1])  # [T, K, C]
    return weighted_sum(pairs, topk_weights).to(x.dtype)


def weighted_sum(pairs: Tensor, weights: Tensor) -> Tensor:
    """pairs [T, K, C] (each token's experts' outputs), weights [T, K] -> [T, C] in fp32:
    the sum over k of weights[t, k] * pairs[t, k] (in C for fp32 on the CPU: the decode
    stack's MoE layers sum with the same kernel)."""
    w = weights.float().contiguous()
    done = native.weighted_sum(pairs, w)
    return done if done is not None else (pairs.float() * w[..., None]).sum(dim=1)


def add_gated(out: Tensor, shared: Tensor, gate: Tensor) -> Tensor:
    """out + shared * sigmoid(gate): a gated shared expert's share added (out [T, C],
    shared [T, C], gate [T, 1]); in C, in place, for fp32 on the CPU."""
    done = native.gate_add(out, shared, gate)
    return done if done is not None else out + shared * torch.sigmoid(gate)


def gate_and_mul(h: Tensor, activation: str) -> Tensor:
    # h: [n, 2I] (gate, then up) -> [n, I]
    if activation == "gelu_tanh":
        return gelu_tanh_and_mul(h)
    return silu_and_mul(h)


@define("torch_fused_moe")
def _fused_moe(
    x: Tensor,
    w13: Tensor,
    w2: Tensor,
    topk_ids: Tensor,
    topk_weights: Tensor,
    activation: str,
) -> Tensor:
    def expert(e: int, rows: Tensor) -> Tensor:
        return F.linear(gate_and_mul(F.linear(rows, w13[e]), activation), w2[e])

    return run_grouped(x, topk_ids, topk_weights, w13.shape[0], expert)


@_fused_moe.register_fake
def _(x, w13, w2, topk_ids, topk_weights, activation) -> Tensor:
    return torch.empty_like(x)


def fused_moe(
    x: Tensor,
    w13: Tensor,
    w2: Tensor,
    topk_ids: Tensor,
    topk_weights: Tensor,
    activation: str = "silu",
) -> Tensor:
    """Routed experts: x [T, C]; w13 [E, 2I, C] (gate rows, then up); w2 [E, C, I];
    topk_ids [T, K] int64 in [0, E); topk_weights [T, K] -> [T, C]."""
    xt = checks.tensor("x", x, 2, checks.FLOAT_DTYPES)
    a = checks.tensor("w13", w13, 3, (xt.dtype,))
    b = checks.tensor("w2", w2, 3, (xt.dtype,))
    ids = checks.tensor("topk_ids", topk_ids, 2, (torch.int64,))
    weights = checks.tensor("topk_weights", topk_weights, 2, checks.FLOAT_DTYPES)
    checks.dim("w13", a, 2, xt.shape[1], "x.shape[1]")
    checks.dim("w2", b, 0, a.shape[0], "the experts of w13")
    checks.dim("w2", b, 1, xt.shape[1], "x.shape[1]")
    checks.dim("w2", b, 2, a.shape[1] // 2, "half of w13.shape[1]")
    checks.dim("topk_ids", ids, 0, xt.shape[0], "x.shape[0]")
    if tuple(weights.shape) != tuple(ids.shape):
        raise ValueError(
            f"topk_weights must have the shape of topk_ids {list(ids.shape)}, "
            f"got {list(weights.shape)}"
        )
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= a.shape[0]):
        raise ValueError(
            f"topk_ids must be in [0, {a.shape[0]}) (experts), got min {int(ids.min())} "
            f"and max {int(ids.max())}"
        )
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    checks.same_device(x=xt, w13=a, w2=b, topk_ids=ids, topk_weights=weights)
    return call("torch_fused_moe", x, w13, w2, topk_ids, topk_weights, activation)


def topk_route(logits: Tensor, top_k: int, normalize: bool) -> tuple[Tensor, Tensor]:
    """Softmax routing: logits [T, E] -> (weights [T, K] fp32, expert ids [T, K] int64).

    The probabilities are taken in fp32 over all experts; the top ``top_k`` are kept
    (``torch.topk``'s choice among equal ones; in C, for fp32 on the CPU, the lowest index
    first), renormalised to sum to 1 if ``normalize``.
    """
    routing = native.RoutingSpec(logits.shape[-1], top_k, normalize)
    done = native.route(logits, routing)  # fp32 on the CPU: in C
    if done is not None:
        return done
    probs = logits.float().softmax(dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def grouped_route(
    logits: Tensor,
    top_k: int,
    n_group: int,
    topk_group: int,
    bias: Tensor | None,
    normalize: bool,
    scaling: float,
) -> tuple[Tensor, Tensor]:
    """Sigmoid routing limited to the best groups (DeepSeek-V3): logits [T, E] ->
    (weights [T, K] fp32, expert ids [T, K] int64).

    Scores are sigmoid(logits) in fp32; the choice adds ``bias`` [E] to them. The experts
    form ``n_group`` equal groups, a group's worth is the sum of its two best choice
    scores, only the ``topk_group`` best groups stay eligible, and the ``top_k`` best
    eligible experts are chosen. Their weights are the plain scores, renormalised if
    ``normalize`` (over the chosen ones), times ``scaling``. In C for fp32 on the CPU (the
    decode stack's MoE layers route with the same kernel); among equal scores, each
    choice is torch.topk's.
    """
    T, E = logits.shape
    if bias is not None:
        bias = bias.float().contiguous()
    routing = native.RoutingSpec(
        E, top_k, normalize, "sigmoid", n_group, topk_group, bias, float(scaling)
    )
    done = native.route(logits, routing)
    if done is not None:
        return done
    scores = logits.float().sigmoid()
    choice = scores if bias is None else scores + bias.float()
    per_group = choice.view(T, n_group, E // n_group)
    worth = per_group.topk(min(2, E // n_group), dim=-1).values.sum(dim=-1)  # [T, G]
    keep = torch.zeros_like(worth).scatter_(1, worth.topk(topk_group, dim=-1).indices, 1.0)
    eligible = keep.bool()[:, :, None].expand_as(per_group).reshape(T, E)
    ids = choice.masked_fill(~eligible, float("-inf")).topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if normalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * scaling, ids
