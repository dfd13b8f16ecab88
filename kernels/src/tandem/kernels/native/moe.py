"""The mixture-of-experts steps in C (``moe.c``), fp32 on the CPU: softmax routing, the
weighted sum of each token's experts and a gated shared expert's share.

The module path (:mod:`tandem.kernels.ops.moe`) calls them where its tensors are fp32 on
the CPU, and the decode stack's MoE layers call the same functions from C, so both paths
give the same numbers. Each entry answers None where C cannot take the call (the caller
runs its torch code).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels.native.contract import constant
from tandem.kernels.native.elementwise import _plain
from tandem.kernels.native.loader import library

MAX_TOP_K = constant("TANDEM_MOE_MAX_TOP_K")
PARTIAL_SORT = constant("TANDEM_MOE_PARTIAL_SORT")


def routes(experts: int, top_k: int) -> bool:
    """Whether the C routing takes ``top_k`` of ``experts`` (torch.topk chooses among
    equals by one algorithm for these, which C follows, and by another beyond)."""
    return 0 < top_k <= min(experts, MAX_TOP_K) and top_k * PARTIAL_SORT > experts


def route(logits: Tensor, top_k: int, normalize: bool) -> tuple[Tensor, Tensor] | None:
    """logits [T, E] -> (weights [T, K] fp32, ids [T, K] int64): softmax over the experts,
    the ``top_k`` most probable (among equals, in torch.topk's order), renormalised to
    sum to 1 if ``normalize``."""
    lib = library()
    if lib is None or not _plain(logits) or logits.dim() != 2:
        return None
    t, e = logits.shape
    if not routes(e, top_k):
        return None
    weights = torch.empty(t, top_k, dtype=torch.float32)
    ids = torch.empty(t, top_k, dtype=torch.int64)
    rc = lib.tandem_moe_route_f32(
        logits.data_ptr(), t, e, top_k, int(normalize), weights.data_ptr(), ids.data_ptr()
    )
    return (weights, ids) if rc == 0 else None


def weighted_sum(done: Tensor, weights: Tensor) -> Tensor | None:
    """done [T, K, C] (each token's experts' outputs), weights [T, K] -> [T, C]: the sum
    over k of weights[t, k] * done[t, k], k in order."""
    lib = library()
    if lib is None or not _plain(done, weights) or done.dim() != 3:
        return None
    t, k, c = done.shape
    if tuple(weights.shape) != (t, k):
        return None
    out = done.new_empty(t, c)
    lib.tandem_moe_sum_f32(done.data_ptr(), weights.data_ptr(), t, k, c, out.data_ptr())
    return out


def gate_add(out: Tensor, shared: Tensor, gate: Tensor) -> Tensor | None:
    """out [T, C] += shared [T, C] * sigmoid(gate [T, 1]), in place; None (out untouched)
    where C cannot take the call."""
    lib = library()
    if lib is None or not _plain(out, shared, gate) or out.dim() != 2:
        return None
    t, c = out.shape
    if tuple(shared.shape) != (t, c) or gate.numel() != t:
        return None
    lib.tandem_moe_gate_add_f32(shared.data_ptr(), gate.data_ptr(), t, c, out.data_ptr())
    return out
