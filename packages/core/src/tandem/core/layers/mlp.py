"""The gated MLP: one fused gate/up projection, SiLU (SwiGLU) or tanh-GELU (GeGLU), down.

Under tensor parallelism a rank holds a run of the intermediate columns (its gate rows
and the matching up rows) and the down projection's matching input columns, whose
partial outputs are summed over the ranks (or left to the caller to sum, ``reduce``
False: a mixture of experts adds its shared expert's share before its one sum).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tandem.core.layers.linear import Linear
from tandem.core.layers.parallel import RowParallelLinear
from tandem.core.parallel.group import TensorParallel
from tandem.core.parallel.layout import Layout, owned_by_first, split
from tandem.core.parallel.partition import even_range
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
        tp: TensorParallel | None = None,
        reduce: bool = True,
    ) -> None:
        super().__init__()
        if activation not in GATES:
            raise ValueError(f"activation must be one of {', '.join(GATES)}, got {activation!r}")
        self.gate = GATES[activation]
        inter = intermediate_size
        if tp is not None:
            self.tp_layouts = _gate_up_layouts(hidden_size, inter, tp)
            inter //= tp.size
        self.gate_up_proj = Linear(hidden_size, 2 * inter, bias=bias, dtype=dtype)
        if tp is None:
            self.down_proj = Linear(inter, hidden_size, bias=bias, dtype=dtype)
        elif reduce:
            self.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias, dtype, tp)
        else:  # the caller sums: the same shard as above, without the sum
            self.down_proj = Linear(inter, hidden_size, bias=bias, dtype=dtype)
            lo, hi = even_range(intermediate_size, tp.size, tp.rank)
            self.down_proj.tp_layouts = {
                "weight": split((hidden_size, intermediate_size), 1, (lo, hi)),
                "bias": owned_by_first((hidden_size,), tp.rank),
            }

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


def _gate_up_layouts(hidden: int, inter: int, tp: TensorParallel) -> dict[str, Layout]:
    """This rank's gate rows, then the same run of up rows."""
    lo, hi = even_range(inter, tp.size, tp.rank)
    rows = ((lo, hi), (inter + lo, inter + hi))
    return {
        "gate_up_proj.weight": split((2 * inter, hidden), 0, *rows),
        "gate_up_proj.bias": split((2 * inter,), 0, *rows),
    }
