"""The gated MLP: one fused gate/up projection, SiLU (SwiGLU) or tanh-GELU (GeGLU), down."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tandem.core.layers.linear import Linear
from tandem.kernels import ops as kernel_ops

# A CPU step of more than 2 * MLP_ROWS tokens runs its MLP MLP_ROWS rows at a time: the
# [rows, 2I] activation then stays in cache between the two matmuls (SmolLM2, 4377 rows:
# 141-147 -> 177-194 GFLOP/s). Rows are independent, so the result is the same.
MLP_ROWS = 1024

GATES = {"silu": kernel_ops.silu_and_mul, "gelu_tanh": kernel_ops.gelu_tanh_and_mul}


class GatedMLP(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        activation: str = "silu",
        bias: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if activation not in GATES:
            raise ValueError(f"activation must be one of {', '.join(GATES)}, got {activation!r}")
        self.gate = GATES[activation]
        self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size, bias=bias, dtype=dtype)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=bias, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        # x: [T, C] -> [T, C]
        t = x.shape[0]
        rows = MLP_ROWS
        if t <= 2 * rows or x.device.type != "cpu":
            return self.rows(x)
        out = x.new_empty(t, self.down_proj.out_features)
        for start in range(0, t, rows):
            out[start : start + rows] = self.rows(x[start : start + rows])
        return out

    def rows(self, x: Tensor) -> Tensor:
        # x: [T, C] -> [T, 2I] -> [T, I] -> [T, C]
        return self.down_proj(self.gate(self.gate_up_proj(x)))

    def quantize(self) -> int:
        return int(self.gate_up_proj.quantize()) + int(self.down_proj.quantize())
