"""The mixture-of-experts steps in C (``moe.c``), fp32 on the CPU: the routing (softmax,
or DeepSeek-V3's group-limited sigmoid), the weighted sum of each token's experts and a
gated shared expert's share.

The module path (:mod:`tandem.kernels.ops.moe`) calls them where its tensors are fp32 on
the CPU, and the decode stack's MoE layers call the same functions from C, so both paths
give the same numbers. Each entry answers None where C cannot take the call (the caller
runs its torch code).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.kernels.native.contract import constant, struct
from tandem.kernels.native.elementwise import _plain
from tandem.kernels.native.loader import library

MAX_TOP_K = constant("TANDEM_MOE_MAX_TOP_K")
PARTIAL_SORT = constant("TANDEM_MOE_PARTIAL_SORT")
SCORINGS = {
    "softmax": constant("TANDEM_MOE_SOFTMAX"),
    "sigmoid": constant("TANDEM_MOE_SIGMOID_GROUPS"),
}
Routing = struct("tandem_moe_routing")


@dataclass(frozen=True, slots=True)
class RoutingSpec:
    """How a token's router logits [E] choose ``top_k`` of ``experts`` (moe.c's
    ``tandem_moe_routing``): softmax, or sigmoid scores limited to the ``group_top`` best
    of ``groups`` groups, ``score_bias`` (fp32 [E] or None) added for the choice only,
    the weights times ``scaling``."""

    experts: int
    top_k: int
    normalize: bool
    scoring: str = "softmax"
    groups: int = 1
    group_top: int = 1
    score_bias: Tensor | None = None
    scaling: float = 1.0

    def reach(self) -> str | None:
        """Why the C routing does not take this one, or None where it does."""
        if self.scoring not in SCORINGS:
            return f"{self.scoring} routing"
        if not routes(self.experts, self.top_k):
            return f"top-{self.top_k} of {self.experts} experts (beyond the C routing)"
        if self.scoring == "softmax":
            return None
        g, top = self.groups, self.group_top
        if g < 1 or self.experts % g or not 0 < top <= g or top * PARTIAL_SORT <= g:
            return f"the {top} best of {g} groups of {self.experts} experts (beyond the C routing)"
        bias = self.score_bias
        if bias is not None and (not _plain(bias) or tuple(bias.shape) != (self.experts,)):
            return "a score bias that is not fp32 [experts] on the CPU"
        return None

    def struct(self) -> ctypes.Structure:
        """The C ``tandem_moe_routing`` (it points into ``score_bias``: keep it alive)."""
        out = Routing()
        out.experts, out.top_k, out.normalize = self.experts, self.top_k, int(self.normalize)
        out.scoring, out.groups, out.group_top = SCORINGS[self.scoring], self.groups, self.group_top
        out.score_bias = None if self.score_bias is None else self.score_bias.data_ptr()
        out.scaling = self.scaling
        return out


def routes(experts: int, top_k: int) -> bool:
    """Whether the C routing takes ``top_k`` of ``experts`` (torch.topk chooses among
    equals by one algorithm for these, which C follows, and by another beyond)."""
    return 0 < top_k <= min(experts, MAX_TOP_K) and top_k * PARTIAL_SORT > experts


def route(logits: Tensor, routing: RoutingSpec) -> tuple[Tensor, Tensor] | None:
    """logits [T, E] -> (weights [T, K] fp32, ids [T, K] int64) as ``routing`` says (among
    equal scores, in torch.topk's order)."""
    lib = library()
    if lib is None or not _plain(logits) or logits.dim() != 2:
        return None
    t, e = logits.shape
    if e != routing.experts or routing.reach() is not None:
        return None
    weights = torch.empty(t, routing.top_k, dtype=torch.float32)
    ids = torch.empty(t, routing.top_k, dtype=torch.int64)
    args = routing.struct()
    rc = lib.tandem_moe_route_f32(
        ctypes.byref(args), logits.data_ptr(), t, weights.data_ptr(), ids.data_ptr()
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
