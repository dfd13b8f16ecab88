"""The fp32 linear layer in C (``linear_f32.c``).

:func:`pack` lays a weight out once in the kernel's panels; :func:`linear` runs one call;
:func:`rows` and :func:`unpack` read the weight back (for a model that keeps the panels alone).
The kernel runs where the CPU has AVX-512 (8-row x 32-channel zmm tiles) or AVX2 with FMA
(up to 6 rows x 16 channels in ymm registers, decode's few rows streaming the weight at
the memory's rate); both answer None where the library is missing or the CPU has
neither, and the caller takes oneDNN (or ``F.linear``) instead.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from tandem.kernels.memory import mapped_zeros
from tandem.kernels.native.contract import constant
from tandem.kernels.native.loader import library

BLOCK_N = constant("TANDEM_PACK_CHANNELS")  # N is padded to a multiple of this


class PackedF32(NamedTuple):
    panels: Tensor  # [Np / 16, K, 16] fp32, zero past N
    n: int
    k: int


def available() -> bool:
    lib = library()
    return lib is not None and bool(lib.tandem_linear_f32_available())


def pack(weight: Tensor) -> PackedF32 | None:
    """weight: [N, K] fp32 on CPU -> its copy in panels of sixteen channels."""
    if not available() or weight.dtype != torch.float32 or weight.device.type != "cpu":
        return None
    n, k = weight.shape
    full = n // 16
    panels = mapped_zeros((-(-n // BLOCK_N) * BLOCK_N // 16, k, 16), torch.float32)
    with torch.no_grad():
        # [N, K] -> [N/16, 16, K] -> [N/16, K, 16]; a last part-panel keeps zeros past N
        panels[:full].copy_(weight[: full * 16].reshape(full, 16, k).transpose(1, 2))
        if n > full * 16:
            panels[full, :, : n - full * 16].copy_(weight[full * 16 :].t())
    return PackedF32(panels, n, k)


def unpack(packed: PackedF32) -> Tensor:
    """The weight [N, K] ``packed`` was made from (a new tensor, equal bit for bit)."""
    # [Np/16, K, 16] -> [Np/16, 16, K] -> [Np, K]; the padding's rows past N dropped
    return packed.panels.transpose(1, 2).reshape(-1, packed.k)[: packed.n]


def rows(packed: PackedF32, ids: Tensor) -> Tensor:
    """Rows ``ids`` [T] of the weight ``packed`` was made from -> [T, K] (an embedding
    lookup in the panels: row i is channel i % 16 of panel i // 16)."""
    if ids.numel():
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= packed.n:
            raise IndexError(f"ids must be in [0, {packed.n}), got {lo}..{hi}")
    return packed.panels[ids // 16, :, ids % 16]


def linear(x: Tensor, packed: PackedF32, bias: Tensor | None) -> Tensor | None:
    """x: [M, K] fp32 -> [M, N] fp32 (``bias``: [N] fp32 or None); None where the C
    kernel cannot take it."""
    lib = library()
    if lib is None or x.dtype != torch.float32 or x.dim() != 2 or x.shape[1] != packed.k:
        return None
    if not x.is_cpu:  # the panels are CPU memory
        return None
    if bias is not None and (bias.dtype != torch.float32 or not bias.is_contiguous()):
        return None
    x = x.contiguous()
    out = torch.empty((x.shape[0], packed.n), dtype=torch.float32)
    if x.shape[0] == 0:
        return out
    done = lib.tandem_linear_f32(
        x.data_ptr(),
        x.shape[0],
        packed.k,
        packed.panels.data_ptr(),
        None if bias is None else bias.data_ptr(),
        packed.n,
        out.data_ptr(),
    )
    return out if done == 0 else None
