"""The int8 linear layer in C (``linear_i8.c``): quantize, VNNI matmul, rescale, outliers.

:func:`pack` lays a weight out once in the kernel's blocks; :func:`linear` runs one call;
:func:`unpack` reads the weight back (its plain copy is not kept beside the blocks).
Both answer None where the library is missing or the CPU has no AVX-512 VNNI, and the
caller takes torch's int8 matmul instead.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from tandem.kernels.memory import mapped_zeros
from tandem.kernels.native.contract import constant
from tandem.kernels.native.loader import library

BLOCK_N = constant("TANDEM_PACK_CHANNELS")  # N is padded to a multiple of this


class PackedI8(NamedTuple):
    blocks: Tensor  # [Np / 16, Kp / 4, 16, 4] int8
    wsum: Tensor  # [N] int32: sum_k w[n, k], for the zero points of x
    n: int
    k: int
    kp: int


def available() -> bool:
    lib = library()
    return lib is not None and bool(lib.tandem_linear_i8_available())


def pack(qweight: Tensor, wsum: Tensor) -> PackedI8 | None:
    """qweight: [N, K] int8 (per-channel quantized), wsum: [N] int32 its row sums -> its
    blocked copy."""
    if not available():
        return None
    n, k = qweight.shape
    np_, kp = -(-n // BLOCK_N) * BLOCK_N, -(-k // 4) * 4
    padded = torch.zeros((np_, kp), dtype=torch.int8)
    padded[:n, :k] = qweight
    # [Np, Kp] -> [Np/16, 16, Kp/4, 4] -> [Np/16, Kp/4, 16, 4]
    blocks = mapped_zeros((np_ // 16, kp // 4, 16, 4), torch.int8)
    blocks.copy_(padded.view(np_ // 16, 16, kp // 4, 4).permute(0, 2, 1, 3))
    return PackedI8(blocks, wsum.contiguous(), n, k, kp)


def unpack(packed: PackedI8) -> Tensor:
    """The int8 weight [N, K] ``packed`` was made from (a new tensor)."""
    blocks = packed.blocks  # [Np/16, Kp/4, 16, 4] -> [Np/16, 16, Kp/4, 4] -> [Np, Kp]
    plain = blocks.permute(0, 2, 1, 3).reshape(blocks.shape[0] * 16, packed.kp)
    return plain[: packed.n, : packed.k].contiguous()


def linear(
    x: Tensor, packed: PackedI8, scale: Tensor, bias: Tensor | None, rel: float
) -> Tensor | None:
    """x: [M, K] fp32 contiguous -> [M, N] fp32 (``scale``: [N], ``bias``: [N] or None);
    ``rel``: the outlier bound, in multiples of a row's rms (``native.quantize_rows``)."""
    lib = library()
    if lib is None or x.dtype != torch.float32 or not x.is_contiguous() or x.dim() != 2:
        return None
    m = x.shape[0]
    out = torch.empty((m, packed.n), dtype=torch.float32)
    if m == 0:
        return out
    done = lib.tandem_linear_i8(
        x.data_ptr(),
        m,
        packed.k,
        packed.blocks.data_ptr(),
        packed.wsum.data_ptr(),
        scale.data_ptr(),
        None if bias is None else bias.data_ptr(),
        packed.n,
        packed.kp,
        float(rel),
        out.data_ptr(),
    )
    return out if done >= 0 else None
