"""RMSNorm with an optional fused residual add."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tandem.kernels import ops


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype), requires_grad=False)

    def forward(self, x: Tensor, residual: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Returns ``(norm(x + residual), x + residual)``; without a residual, ``x`` itself."""
        # x, residual: [T, C]
        if residual is None:
            return ops.rms_norm(x, self.weight, self.eps), x
        return ops.fused_add_rms_norm(x, residual, self.weight, self.eps)
