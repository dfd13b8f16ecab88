"""Linear layers on GGUF block weights in C: one call per matmul.

Two kernels, chosen by the number of rows of x (F16 / BF16 weights take x as it is, in
fp32, on both; the other formats round it as follows). Below :data:`PREFILL_ROWS`
(decode, small batches) ``linear_gguf.c`` reads the blocks directly with x rounded to int8
per 32 values and integer dot products: the weights' bytes stream once and are the cost.
From :data:`PREFILL_ROWS` on ``linear_gguf_f32.c`` decodes bands of weight rows to fp32
once per call and multiplies them with all rows through an fp32 kernel: the products are
the cost there, and fp32 ones beat re-unpacking every block per group of rows. Both round
x the same way (the tiles take x's int8 rounding back to fp32), so they differ only in
the order of their fp32 sums: a row's result does not depend on the batch it ran in
beyond that, and engines that batch differently keep making the same tokens.

:func:`linear` answers None where the library is missing or cannot take the call, and
the caller takes the torch reference (dequantize, then matmul) instead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from tandem.kernels.gguf_blocks import FORMATS
from tandem.kernels.native.contract import constant
from tandem.kernels.native.loader import library

# Rows of x from which the fp32-tile kernel runs (the header says why; the decode stack
# routes by the same constant).
PREFILL_ROWS = constant("TANDEM_GGUF_TILE_ROWS")


def simd() -> bool:
    """Whether the kernel was built with its vector path (AVX2 + FMA + F16C, or better)."""
    lib = library()
    return lib is not None and bool(lib.tandem_linear_gguf_simd())


def supports(qtype: int) -> bool:
    """Whether the C kernels take weights in ``qtype`` (every format of
    :data:`~tandem.kernels.gguf_blocks.FORMATS` where the library is built)."""
    lib = library()
    return lib is not None and qtype in FORMATS and lib.tandem_gguf_block_bytes(qtype) > 0


_KERNELS: list[tuple[Callable[..., int], Callable[..., int]] | None] = []


def _kernels() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """The two entries (int8 rows, fp32 tiles), bound once: a decode step makes one call
    per linear layer, each 10-100 us of kernel, so the Python side is kept to a few us."""
    if not _KERNELS:
        lib = library()
        _KERNELS.append(
            None if lib is None else (lib.tandem_linear_gguf, lib.tandem_linear_gguf_f32)
        )
    return _KERNELS[0]


def linear(x: Tensor, data: Tensor, qtype: int, k: int, tiles: bool | None = None) -> Tensor | None:
    """x: [M, k] fp32 -> [M, N] fp32 against ``data`` [N, row bytes] uint8 of ``qtype``.
    ``tiles``: the fp32-tile kernel (True) or the int8 one (False); None: by M."""
    kernels = _KERNELS[0] if _KERNELS else _kernels()
    if kernels is None or qtype not in FORMATS or x.dtype != torch.float32 or x.dim() != 2:
        return None
    if not (x.is_cpu and data.is_cpu and data.is_contiguous()):
        return None
    x = x.contiguous()
    m, n = x.shape[0], data.shape[0]
    out = torch.empty(m, n, dtype=torch.float32)
    if m == 0 or n == 0:
        return out
    fn = kernels[1 if (m >= PREFILL_ROWS if tiles is None else tiles) else 0]
    done = fn(qtype, x.data_ptr(), m, k, data.data_ptr(), n, out.data_ptr())
    return out if done == 0 else None


def rows(data: Tensor, index: Tensor, qtype: int, k: int) -> Tensor | None:
    """Rows ``index`` [n] of ``data`` [N, row bytes] in ``qtype`` blocks, decoded to fp32
    [n, k] (an embedding lookup); None where C cannot take it. The indices must be in
    [0, N): the caller checks them."""
    lib = library()
    if lib is None or qtype not in FORMATS or not (data.is_cpu and data.is_contiguous()):
        return None
    if index.dim() != 1 or not index.is_cpu:
        return None
    idx = index if index.dtype == torch.int64 else index.to(torch.int64)
    idx = idx.contiguous()
    out = torch.empty(idx.shape[0], k, dtype=torch.float32)
    if idx.shape[0]:
        lib.tandem_gguf_decode_rows(
            qtype, data.data_ptr(), data.shape[1], idx.data_ptr(), idx.shape[0], k, out.data_ptr()
        )
    return out
