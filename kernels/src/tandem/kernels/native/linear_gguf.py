"""Linear layers on GGUF block weights in C (``linear_gguf.c``): one call per matmul.

:func:`linear` answers None where the library is missing or cannot take the call, and
the caller takes the torch reference (dequantize, then matmul) instead.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels.gguf_blocks import FORMATS
from tandem.kernels.native.loader import library


def simd() -> bool:
    """Whether the kernel was built with its vector path (AVX2 + FMA + F16C, or better)."""
    lib = library()
    return lib is not None and bool(lib.tandem_linear_gguf_simd())


def linear(x: Tensor, data: Tensor, qtype: int, k: int) -> Tensor | None:
    """x: [M, k] fp32 -> [M, N] fp32 against ``data`` [N, row bytes] uint8 of ``qtype``."""
    lib = library()
    if lib is None or qtype not in FORMATS or x.dtype != torch.float32 or x.dim() != 2:
        return None
    if x.device.type != "cpu" or data.device.type != "cpu" or not data.is_contiguous():
        return None
    x = x.contiguous()
    n = data.shape[0]
    out = torch.empty((x.shape[0], n), dtype=torch.float32)
    if x.shape[0] == 0 or n == 0:
        return out
    done = lib.tandem_linear_gguf(
        qtype, x.data_ptr(), x.shape[0], k, data.data_ptr(), n, out.data_ptr()
    )
    return out if done == 0 else None
