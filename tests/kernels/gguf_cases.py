"""The random cases of the GGUF linear tests (``test_linear_gguf*.py``): a quantized weight
with rows of x to multiply it by, and how far a kernel that rounds x to int8 may be from
the float product. Importable as ``gguf_cases`` from the test modules of this folder."""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels.gguf_blocks import QuantWeight, quantize


def weight_and_x(qtype: int, n: int, m: int, k: int, seed: int) -> tuple[QuantWeight, Tensor]:
    """n random rows of k values quantized to ``qtype``, and m rows of x, each row at its
    own scale (up to 4): both from one generator seeded with ``seed``, the weight first."""
    g = torch.Generator().manual_seed(seed)
    qw = quantize(torch.randn(n, k, generator=g), qtype)
    x = torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g).mul(4)
    return qw, x


def int8_bound(x: Tensor, w: Tensor) -> Tensor:
    """How far a kernel may be from ``x @ w.T``: x is rounded to int8 per 32 values (half a
    step, amax / 254, per value), times |W| summed, plus fp32 rounding."""
    m, k = x.shape
    half_step = x.reshape(m, k // 32, 32).abs().amax(-1, keepdim=True) / 254
    err = half_step.expand(m, k // 32, 32).reshape(m, k)
    return 1.01 * err @ w.abs().t() + 1e-4 * (x.abs() @ w.abs().t()) + 1e-5
