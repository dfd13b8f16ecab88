"""A mixture-of-experts MLP: a router, routed experts, an optional (gated) shared expert.

The routed experts' weights are stacked, ``experts.gate_up.weight`` [E, 2I, C] (gate rows,
then up) and ``experts.down.weight`` [E, C, I]; a step's tokens are grouped by expert and
each expert runs as one matmul pair over its tokens (:mod:`tandem.kernels.ops.moe`). On
the CPU each expert's matrices go through the same packed kernels as the dense layers
(or int8 after :meth:`SparseMoE.quantize`); elsewhere through ``tandem::torch_fused_moe``.
A GGUF file's experts may stay in their blocks (``quantization="gguf"``): each expert's
projections are then GGUF weights (:meth:`Stacked.use_quantized`), run one expert at a
time through ``tandem::torch_linear_gguf`` on any device. Each expert's weight is one
:class:`~tandem.core.layers.weight_form.WeightForm`, as a dense layer's.

Under tensor parallelism the experts are split, not sliced: each rank holds a contiguous
run of whole experts (expert parallel) and runs the pairs routed to them; the router is
every rank's, the shared expert is split like a dense MLP, and one sum over the ranks
adds both partial outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from tandem.core.layers.linear import Linear, check_kernel, free_weight
from tandem.core.layers.mlp import GatedMLP
from tandem.core.layers.weight_form import Dense, GgufBlocks, Int8, WeightForm, gguf_form
from tandem.core.parallel.group import TensorParallel
from tandem.core.parallel.layout import split
from tandem.core.parallel.partition import spread_range
from tandem.kernels import ops as kernel_ops
from tandem.kernels.gguf_blocks import QuantStack, QuantWeight
from tandem.kernels.ops.linear_int8 import Int8Weight
from tandem.kernels.ops.moe import (
    add_gated,
    gate_and_mul,
    grouped_route,
    run_grouped,
    topk_route,
)

if TYPE_CHECKING:  # models imports layers: keep this edge type-only
    from tandem.core.spec.model import MLPSpec


class Stacked(nn.Module):
    """One weight per expert, stacked: ``weight`` [E, N, K] (filled by the loader); expert
    e's in the form ``forms[e]`` (the float weight's slice; int8; or kept in GGUF blocks,
    then ``weight`` is None)."""

    def __init__(self, experts: int, rows: int, cols: int, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.shape = (experts, rows, cols)
        self.weight = nn.Parameter(torch.empty(experts, rows, cols, dtype=dtype), False)
        self.forms: list[WeightForm] = [Dense(self._parameters, e) for e in range(experts)]

    def use_quantized(self, weights: list[QuantWeight | QuantStack]) -> None:
        """Multiply by ``weights`` (one per expert, GGUF blocks) from now on; the float
        weight must already be gone (the loader never makes it)."""
        experts, rows, cols = self.shape
        shapes = {(w.n, w.k) for w in weights}
        if len(weights) != experts or shapes != {(rows, cols)}:
            raise ValueError(
                f"weights must be {experts} quantized weights of [{rows}, {cols}], got "
                f"{len(weights)} of {sorted(shapes)}"
            )
        self.forms = [gguf_form(w) for w in weights]

    def free_float(self) -> int:
        """Keep each expert's weight in its form alone where every one holds all of it,
        and free the stacked float weight; the bytes freed."""
        forms = [form.standalone() for form in self.forms]
        if any(form is None for form in forms):
            return 0
        self.forms = forms  # type: ignore[assignment]
        return free_weight(self)

    def _apply(self, fn: Any, recurse: bool = True) -> Stacked:
        self.forms = [form.moved() for form in self.forms]  # packed again from the new weights
        return super()._apply(fn, recurse)

    @property
    def quant(self) -> list[QuantWeight | QuantStack] | None:
        """Each expert's GGUF blocks, where they are kept in them (for inspection)."""
        if not all(isinstance(form, GgufBlocks) for form in self.forms):
            return None
        return [form.blocks for form in self.forms]  # type: ignore[union-attr]


class Experts(nn.Module):
    """The routed experts, stacked; under tensor parallelism this rank's run of them."""

    def __init__(
        self,
        experts: int,
        hidden: int,
        inter: int,
        activation: str,
        dtype: torch.dtype | None,
        tp: TensorParallel | None = None,
    ) -> None:
        super().__init__()
        self.first: int | None = None  # the first expert held, under tensor parallelism
        if tp is not None:
            lo, hi = spread_range(experts, tp.size, tp.rank)
            self.tp_layouts = {
                "gate_up.weight": split((experts, 2 * inter, hidden), 0, (lo, hi)),
                "down.weight": split((experts, hidden, inter), 0, (lo, hi)),
            }
            self.first, experts = lo, hi - lo
        self.num_experts = experts
        self.activation = activation
        self.gate_up = Stacked(experts, 2 * inter, hidden, dtype)
        self.down = Stacked(experts, hidden, inter, dtype)
        self.kernel = "native"  # the engine's choice, as Linear's

    def forward(self, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        # x: [T, C]; ids, weights: [T, K] -> [T, C]
        if self.first is not None:
            return self._held(x, ids, weights)
        if self.gate_up.forms[0].plain(x) and self.down.forms[0].plain(x):
            w13, w2 = self.gate_up.weight, self.down.weight
            return kernel_ops.fused_moe(x, w13, w2, ids, weights, self.activation)
        return run_grouped(x, ids, weights, self.num_experts, self._expert)

    def _held(self, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
        """The share of the output from the experts held here: pairs routed elsewhere
        go to one extra bucket, which adds nothing. x: [T, C]; ids, weights: [T, K]."""
        assert self.first is not None
        n = self.num_experts
        local = ids - self.first  # [T, K]
        held = (local >= 0) & (local < n)
        local = torch.where(held, local, torch.full_like(local, n))

        def expert(e: int, rows: Tensor) -> Tensor:
            return rows.new_zeros(rows.shape) if e == n else self._expert(e, rows)

        return run_grouped(x, local, weights, n + 1, expert)

    def _expert(self, e: int, rows: Tensor) -> Tensor:
        # rows: [n, C] -> [n, 2I] -> [n, I] -> [n, C] through expert e's weights
        h = self.gate_up.forms[e].matmul(rows).to(rows.dtype)
        return self.down.forms[e].matmul(gate_and_mul(h, self.activation)).to(rows.dtype)

    @property
    def kept(self) -> bool:
        """Whether some of the expert weights are kept in GGUF blocks."""
        return self.gate_up.quant is not None or self.down.quant is not None

    @property
    def int8(self) -> list[tuple[Int8Weight, Int8Weight]] | None:
        """Each expert's int8 (gate_up, down), after :meth:`quantize` (for inspection)."""
        pairs = list(zip(self.gate_up.forms, self.down.forms))
        if not all(isinstance(f, Int8) for pair in pairs for f in pair):
            return None
        return [(up.weight, down.weight) for up, down in pairs]  # type: ignore[union-attr]

    def use_kernel(self, kernel: str) -> None:
        """Multiply the experts on ``kernel`` (one of ``LINEAR_KERNELS``) from now on."""
        self.kernel = check_kernel(kernel)
        for form in (*self.gate_up.forms, *self.down.forms):
            form.use_kernel(kernel)

    def prepare(self) -> None:
        for form in (*self.gate_up.forms, *self.down.forms):
            form.prepare()

    def quantize(self) -> int:
        """Every expert weight in int8; 0 (none) where one cannot be (GGUF blocks)."""
        forms = []
        for form in (*self.gate_up.forms, *self.down.forms):
            int8 = form.quantized()
            if int8 is None:
                return 0
            forms.append(int8)
        e = self.num_experts
        self.gate_up.forms, self.down.forms = forms[:e], forms[e:]
        return 2 * e


class SparseMoE(nn.Module):
    def __init__(
        self,
        hidden: int,
        spec: MLPSpec,
        dtype: torch.dtype | None,
        tp: TensorParallel | None = None,
    ) -> None:
        super().__init__()
        moe = spec.moe
        assert moe is not None
        self.moe = moe
        self.tp = tp
        self.gate = Linear(hidden, moe.num_experts, bias=False, dtype=dtype)  # the router
        if moe.score_bias:  # added to the scores for the choice of experts only
            bias = torch.empty(moe.num_experts, dtype=torch.float32)
            self.gate.e_score_correction_bias = nn.Parameter(bias, requires_grad=False)
        self.experts = Experts(
            moe.num_experts, hidden, moe.intermediate_size, spec.activation, dtype, tp
        )
        self.shared_expert: GatedMLP | None = None
        self.shared_expert_gate: Linear | None = None
        if moe.shared_intermediate_size:
            inter = moe.shared_intermediate_size
            self.shared_expert = GatedMLP(
                hidden, inter, spec.activation, dtype=dtype, tp=tp, reduce=False
            )
            if moe.shared_gate:
                self.shared_expert_gate = Linear(hidden, 1, bias=False, dtype=dtype)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        # x: [T, C] -> (weights [T, K] fp32, expert ids [T, K])
        moe, logits = self.moe, self.gate(x)
        if moe.scoring == "softmax":
            return topk_route(logits, moe.top_k, moe.norm_topk_prob)
        bias = getattr(self.gate, "e_score_correction_bias", None)
        return grouped_route(
            logits,
            moe.top_k,
            moe.n_group,
            moe.topk_group,
            bias,
            moe.norm_topk_prob,
            moe.routed_scaling,
        )

    def forward(self, x: Tensor) -> Tensor:
        # x: [T, C] -> [T, C]
        weights, ids = self.route(x)  # [T, K] each
        out = self.experts(x, ids, weights)
        if self.shared_expert is not None:
            shared = self.shared_expert(x)
            if self.shared_expert_gate is not None:  # scaled by sigmoid(x . w) in (0, 1)
                out = add_gated(out, shared, self.shared_expert_gate(x))
            else:
                out = out + shared
        if self.tp is not None:  # both shares summed at once
            out = self.tp.all_reduce(out)
        return out

    def quantize(self) -> int:
        """The experts (routed and shared) in int8; the router stays as it is."""
        done = self.experts.quantize()
        if self.shared_expert is not None:
            done += self.shared_expert.quantize()
        return done
