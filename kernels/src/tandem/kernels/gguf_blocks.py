"""GGUF block-quantized weights as stored: the formats, a torch dequantizer, a quantizer.

A weight [N, K] in one of these formats is kept as the file keeps it: a uint8 tensor
[N, K / 32 * block_bytes], each row its K / 32 blocks of 32 values. The formats (their
GGUF type numbers):

- ``Q8_0`` (8): f16 scale d, 32 int8 q; value = d * q (34 bytes)
- ``Q4_0`` (2): f16 d, 16 bytes of nibbles; value = d * (n - 8) (18 bytes)
- ``Q4_1`` (3): f16 d, f16 m, 16 bytes of nibbles; value = d * n + m (20 bytes)

and the K-quants ``Q4_K`` (12), ``Q5_K`` (13), ``Q6_K`` (14), whose super-blocks hold 256
values each (:mod:`tandem.kernels.gguf_kquants` has their layouts): a K-quant row is
[K / 256 * block_bytes].

In a 4-bit block, value j < 16 is the low nibble of byte j, value j >= 16 the high nibble
of byte j - 16. :func:`dequantize` is the reference every kernel is tested against;
:func:`quantize` makes such weights from floats (tests, and checkpoints made here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.kernels import gguf_kquants
from tandem.kernels.gguf_kquants import KFORMATS, QK_K

QK = 32
# GGUF type number -> (name, bytes per block); a block is QK values, a K-quant's QK_K
FORMATS: dict[int, tuple[str, int]] = {2: ("Q4_0", 18), 3: ("Q4_1", 20), 8: ("Q8_0", 34)}
FORMATS |= KFORMATS
BY_NAME = {name: code for code, (name, _) in FORMATS.items()}


@dataclass(frozen=True, slots=True)
class QuantWeight:
    """A weight [n, k] kept in its GGUF blocks: ``data`` uint8 [n, row_bytes(qtype, k)]."""

    data: Tensor
    qtype: int
    n: int
    k: int

    def __post_init__(self) -> None:
        if self.qtype not in FORMATS:
            raise ValueError(f"qtype must be one of {sorted(FORMATS)}, got {self.qtype!r}")
        want = (self.n, row_bytes(self.qtype, self.k))
        if self.data.dtype != torch.uint8 or tuple(self.data.shape) != want:
            raise ValueError(
                f"data must be uint8 of shape {list(want)}, got {self.data.dtype} "
                f"{list(self.data.shape)}"
            )

    @property
    def name(self) -> str:
        return FORMATS[self.qtype][0]

    def rows(self, index: Tensor) -> Tensor:
        """The rows ``index`` dequantized: [len(index), k] fp32 (an embedding lookup)."""
        return dequantize(self.data[index], self.qtype, self.k)


@dataclass(frozen=True, slots=True)
class QuantStack:
    """A weight [n, k] whose row ranges are kept in different formats: ``parts`` stacked
    along n. A fused module of a Q4_K_M file (q, k in Q4_K, v in Q6_K) is one."""

    parts: tuple[QuantWeight, ...]

    def __post_init__(self) -> None:
        if not self.parts or len({p.k for p in self.parts}) != 1:
            raise ValueError("parts must be one or more QuantWeights of the same k")

    @property
    def n(self) -> int:
        return sum(p.n for p in self.parts)

    @property
    def k(self) -> int:
        return self.parts[0].k

    @property
    def name(self) -> str:
        return "+".join(p.name for p in self.parts)


def block_values(qtype: int) -> int:
    """How many weights one block of ``qtype`` holds: 32, or 256 for a K-quant."""
    return QK_K if qtype in KFORMATS else QK


def row_bytes(qtype: int, k: int) -> int:
    size = block_values(qtype)
    if k % size:
        name = FORMATS[qtype][0]
        raise ValueError(f"a GGUF {name} row needs k to be a multiple of {size}, got {k}")
    return k // size * FORMATS[qtype][1]


def _half(raw: Tensor) -> Tensor:
    # raw: [..., 2] uint8 -> [...] fp32 (little-endian float16)
    return raw.contiguous().view(torch.float16).squeeze(-1).float()


def _nibbles(raw: Tensor) -> Tensor:
    # raw: [..., 16] uint8 -> [..., 32] values 0..15 in block order
    return torch.cat((raw & 0x0F, raw >> 4), dim=-1).float()


def dequantize(data: Tensor, qtype: int, k: int) -> Tensor:
    """data: [N, row_bytes] uint8 -> [N, k] fp32."""
    if qtype in KFORMATS:
        return gguf_kquants.dequantize(data, qtype, k)
    size = FORMATS[qtype][1]
    blocks = data.reshape(data.shape[0], k // QK, size)  # [N, B, size]
    d = _half(blocks[..., 0:2]).unsqueeze(-1)  # [N, B, 1]
    if qtype == 8:
        values = d * blocks[..., 2:].contiguous().view(torch.int8).float()
    elif qtype == 2:
        values = d * (_nibbles(blocks[..., 2:]) - 8.0)
    else:
        m = _half(blocks[..., 2:4]).unsqueeze(-1)
        values = d * _nibbles(blocks[..., 4:]) + m
    return values.reshape(data.shape[0], k)


def _f16_bytes(x: Tensor) -> Tensor:
    # [...] fp32 -> [..., 2] uint8
    return x.to(torch.float16).unsqueeze(-1).view(torch.uint8)


def quantize(w: Tensor, qtype: int) -> QuantWeight:
    """w: [N, K] float (K a multiple of 32, of 256 for a K-quant) -> its blocks, by round
    to nearest."""
    n, k = w.shape
    row_bytes(qtype, k)
    if qtype in KFORMATS:
        return QuantWeight(gguf_kquants.quantize(w, qtype), qtype, n, k)
    x = w.detach().float().reshape(n, k // QK, QK)  # [N, B, 32]
    if qtype == 8:
        d = x.abs().amax(-1) / 127.0
        dh = d.to(torch.float16).float()
        inv = torch.where(dh > 0, 1.0 / dh, torch.zeros_like(dh)).unsqueeze(-1)
        q = (x * inv).round().clamp(-127, 127).to(torch.int8).view(torch.uint8)
        parts = [_f16_bytes(d), q]
    else:
        if qtype == 2:  # symmetric: the value of largest magnitude maps to -8
            big = x.gather(-1, x.abs().argmax(-1, keepdim=True)).squeeze(-1)
            d, lo = big / -8.0, None
        else:
            lo, hi = x.amin(-1), x.amax(-1)
            d = (hi - lo) / 15.0
        dh = d.to(torch.float16).float()
        inv = torch.where(dh != 0, 1.0 / dh, torch.zeros_like(dh)).unsqueeze(-1)
        if lo is None:
            q = (x * inv + 8.0).round().clamp(0, 15)
        else:
            q = ((x - lo.to(torch.float16).float().unsqueeze(-1)) * inv).round().clamp(0, 15)
        q = q.to(torch.uint8)
        packed = q[..., :16] | (q[..., 16:] << 4)
        parts = [_f16_bytes(d)] + ([] if lo is None else [_f16_bytes(lo)]) + [packed]
    data = torch.cat(parts, dim=-1).reshape(n, -1).contiguous()
    return QuantWeight(data, qtype, n, k)
