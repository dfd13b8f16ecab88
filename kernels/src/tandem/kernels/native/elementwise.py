"""Row-wise kernels in C (``elementwise.c``), fp32 on the CPU.

Called from inside the ``tandem::torch_*`` ops' CPU implementations (and the greedy
sampling path); each entry answers None where C cannot take the call, and the caller
runs its torch code instead.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels.native.loader import library

F32 = torch.float32


def _plain(*tensors: Tensor) -> bool:
    """fp32, on the CPU, contiguous: what the C row kernels read."""
    for t in tensors:  # noqa: SIM110 (a loop, not all() over a generator: several calls a layer)
        if t.dtype != F32 or not t.is_cpu or not t.is_contiguous():
            return False
    return True


def add_rms_norm(
    x: Tensor, residual: Tensor | None, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor] | None:
    """``(rms_norm(x + residual) * weight, x + residual)``; without a residual the second
    is ``x``. x, residual: [..., C]; weight: [C]."""
    parts = (x, weight) if residual is None else (x, residual, weight)
    lib = library()
    if lib is None or not _plain(*parts) or x.dim() < 1:
        return None
    C = x.shape[-1]
    out = torch.empty_like(x)
    summed = x if residual is None else torch.empty_like(x)
    lib.tandem_add_rms_norm_f32(
        x.data_ptr(),
        None if residual is None else residual.data_ptr(),
        weight.data_ptr(),
        float(eps),
        x.numel() // max(C, 1),
        C,
        out.data_ptr(),
        summed.data_ptr(),
    )
    return out, summed


def silu_and_mul(x: Tensor) -> Tensor | None:
    """x: [..., 2I] -> silu(x[..., :I]) * x[..., I:]: [..., I]."""
    return _gated(x, "tandem_silu_and_mul_f32")


def gelu_tanh_and_mul(x: Tensor) -> Tensor | None:
    """x: [..., 2I] -> gelu_tanh(x[..., :I]) * x[..., I:]: [..., I]."""
    return _gated(x, "tandem_gelu_tanh_and_mul_f32")


def _gated(x: Tensor, name: str) -> Tensor | None:
    lib = library()
    if lib is None or not _plain(x) or x.dim() < 1:
        return None
    inner = x.shape[-1] // 2
    out = x.new_empty((*x.shape[:-1], inner))
    getattr(lib, name)(x.data_ptr(), x.numel() // max(2 * inner, 1), inner, out.data_ptr())
    return out


def rotary(positions: Tensor, x: Tensor, cos_sin: Tensor, rotary_dim: int = 0) -> Tensor | None:
    """Rotate-half rope of x: [T, H, D] (any token stride, heads contiguous) at
    ``positions``: [T] (validated: inside cos_sin's rows) -> a new contiguous tensor.
    ``rotary_dim`` R (0: all D): only the leading R of each head rotate (cos_sin [P, R]),
    the rest are copied."""
    lib = library()
    T, H, D = x.shape
    if lib is None or x.dtype != F32 or not x.is_cpu or not _plain(cos_sin):
        return None
    if x.stride(2) != 1 or (H > 1 and x.stride(1) != D) or T == 0:
        return None
    r = rotary_dim or D
    if r % 2 or not 0 < r <= D or cos_sin.shape[-1] != r:
        return None
    pos = positions.to(torch.int64).contiguous()
    out = x.new_empty(T, H, D)  # x: fp32 on the CPU
    args = (pos.data_ptr(), x.data_ptr(), x.stride(0), cos_sin.data_ptr(), T, H, D)
    if r == D:
        lib.tandem_rotary_f32(*args, out.data_ptr())
    else:
        lib.tandem_rotary_part_f32(*args, r, out.data_ptr())
    return out


def greedy(logits: Tensor) -> tuple[Tensor, Tensor] | None:
    """Per row of logits [B, V]: the argmax (first on ties) [B] int64 and its raw
    logprob [B] fp32, in one pass; None where C cannot take it (or a row is not finite)."""
    lib = library()
    if lib is None or not _plain(logits) or logits.dim() != 2 or logits.shape[1] == 0:
        return None
    B, V = logits.shape
    tokens = torch.empty(B, dtype=torch.int64)
    logprob = torch.empty(B, dtype=F32)
    if B and lib.tandem_greedy_f32(logits.data_ptr(), B, V, tokens.data_ptr(), logprob.data_ptr()):
        return None
    return tokens, logprob


I8 = torch.int8


def quantize_rows(x: Tensor, rel: float) -> tuple[Tensor, Tensor, Tensor, Tensor, int] | None:
    """x: [M, K] fp32 -> (int8 rows q [M, K], scales [M], zero points [M] int32, outlier
    bounds [M], how many outliers), x ~= scale * (q - zero) per row (asymmetric: the row's
    range onto 256 steps). An entry with |x| > its row's bound (``rel`` * rms(row)) is an
    outlier: its q is the zero point (it stands for 0)."""
    lib = library()
    if lib is None or not _plain(x) or x.dim() != 2:
        return None
    m, k = x.shape
    q = torch.empty((m, k), dtype=I8)
    scale = torch.empty(m, dtype=F32)
    zero = torch.empty(m, dtype=torch.int32)
    bound = torch.empty(m, dtype=F32)
    count = torch.empty(m, dtype=torch.int32)
    flip = 0x80  # the C side writes bytes u ^ 0x80, which read as int8 are u - 128
    args = (q.data_ptr(), k, flip, scale.data_ptr(), zero.data_ptr(), bound.data_ptr())
    total = lib.tandem_quantize_rows_u8(x.data_ptr(), m, k, float(rel), *args, count.data_ptr())
    return q, scale, zero.sub_(128), bound, int(total)


def rescale(
    acc: Tensor,
    row_zero: Tensor,
    col_sum: Tensor,
    row_scale: Tensor,
    col_scale: Tensor,
    bias: Tensor | None,
) -> Tensor | None:
    """acc: [M, N] int32 -> (acc - row_zero[:, None] * col_sum[None, :]) * row_scale[:, None]
    * col_scale[None, :] (+ bias): fp32 (row_zero [M], col_sum [N]: int32)."""
    lib = library()
    parts = (row_scale, col_scale) if bias is None else (row_scale, col_scale, bias)
    ints = (acc, row_zero, col_sum)
    plain_ints = all(
        t.dtype == torch.int32 and t.device.type == "cpu" and t.is_contiguous() for t in ints
    )
    if lib is None or not plain_ints or not _plain(*parts) or acc.dim() != 2:
        return None
    m, n = acc.shape
    out = torch.empty((m, n), dtype=F32)
    lib.tandem_rescale_i32(
        acc.data_ptr(),
        m,
        n,
        row_zero.data_ptr(),
        col_sum.data_ptr(),
        row_scale.data_ptr(),
        col_scale.data_ptr(),
        None if bias is None else bias.data_ptr(),
        out.data_ptr(),
    )
    return out
