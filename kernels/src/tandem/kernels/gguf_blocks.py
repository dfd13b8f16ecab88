"""GGUF block-quantized weights as stored: the formats, a torch dequantizer, a quantizer.

A weight [N, K] in one of these formats is kept as the file keeps it: a uint8 tensor
[N, K / 32 * block_bytes], each row its K / 32 blocks of 32 values. The formats (their
GGUF type numbers):

- ``Q8_0`` (8): f16 scale d, 32 int8 q; value = d * q (34 bytes)
- ``Q4_0`` (2): f16 d, 16 bytes of nibbles; value = d * (n - 8) (18 bytes)
- ``Q4_1`` (3): f16 d, f16 m, 16 bytes of nibbles; value = d * n + m (20 bytes)
- ``Q5_0`` (6): f16 d, 4 bytes of high bits, 16 bytes of nibbles; value = d * (q - 16)
  with q = n + 16 * (bit j of the little-endian uint32) for value j (22 bytes)
- ``Q5_1`` (7): f16 d, f16 m, high bits, nibbles; value = d * q + m (24 bytes)

the K-quants ``Q4_K`` (12), ``Q5_K`` (13), ``Q6_K`` (14) (:mod:`tandem.kernels.gguf_kquants`
has their layouts) and ``Q2_K`` (10), ``Q3_K`` (11) (:mod:`tandem.kernels.gguf_kquants_low`),
whose super-blocks hold 256 values each: a K-quant row is [K / 256 * block_bytes]; and the
16-bit floats ``F16`` (1) and ``BF16`` (30), a row of K little-endian values [2 K], any K.

In a 4-bit block, value j < 16 is the low nibble of byte j, value j >= 16 the high nibble
of byte j - 16. :func:`dequantize` is the reference every kernel is tested against;
:func:`quantize` makes such weights from floats (tests, and checkpoints made here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.kernels import gguf_kquants, gguf_kquants_low
from tandem.kernels.gguf_kquants import KFORMATS, QK_K
from tandem.kernels.gguf_kquants_low import LOW_KFORMATS

QK = 32
# GGUF type number -> (name, bytes per block); a block is QK values, a K-quant's QK_K
FORMATS: dict[int, tuple[str, int]] = {2: ("Q4_0", 18), 3: ("Q4_1", 20), 8: ("Q8_0", 34)}
FORMATS |= {6: ("Q5_0", 22), 7: ("Q5_1", 24)}  # llama.cpp's Q4_K / Q5_K for rows not of 256
FORMATS |= KFORMATS | LOW_KFORMATS
FLOAT16: dict[int, tuple[str, int]] = {1: ("F16", 2), 30: ("BF16", 2)}  # a "block" is one value
FORMATS |= FLOAT16
SUPER_BLOCKS = KFORMATS.keys() | LOW_KFORMATS.keys()  # the formats of 256-value blocks
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
    """How many weights one block of ``qtype`` holds: 32, 256 for a K-quant, 1 for F16 /
    BF16."""
    return QK_K if qtype in SUPER_BLOCKS else 1 if qtype in FLOAT16 else QK


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
    if qtype in LOW_KFORMATS:
        return gguf_kquants_low.dequantize(data, qtype, k)
    if qtype in FLOAT16:
        kind = torch.float16 if qtype == 1 else torch.bfloat16
        return data.contiguous().view(kind).float().reshape(data.shape[0], k)
    size = FORMATS[qtype][1]
    blocks = data.reshape(data.shape[0], k // QK, size)  # [N, B, size]
    d = _half(blocks[..., 0:2]).unsqueeze(-1)  # [N, B, 1]
    if qtype == 8:
        return (d * blocks[..., 2:].contiguous().view(torch.int8).float()).reshape(-1, k)
    sym, five = qtype in (2, 6), qtype in (6, 7)
    at = 2 if sym else 4  # after d (and m)
    q = _nibbles(blocks[..., at + 4 * five :])  # [N, B, 32]
    if five:  # value j's fifth bit: bit j of the uint32 at ``at``
        shift = torch.arange(8, device=data.device)
        bits = (blocks[..., at : at + 4].long().unsqueeze(-1) >> shift) & 1  # [N, B, 4, 8]
        q = q + 16.0 * bits.flatten(-2).float()
    if sym:
        values = d * (q - (16.0 if five else 8.0))
    else:
        values = d * q + _half(blocks[..., 2:4]).unsqueeze(-1)
    return values.reshape(data.shape[0], k)


def _f16_bytes(x: Tensor) -> Tensor:
    # [...] fp32 -> [..., 2] uint8
    return x.to(torch.float16).unsqueeze(-1).view(torch.uint8)


def quantize(w: Tensor, qtype: int) -> QuantWeight:
    """w: [N, K] float (K a multiple of 32, of 256 for a K-quant) -> its blocks, by round
    to nearest (F16 / BF16: each value rounded to nearest even)."""
    if qtype not in FORMATS:
        raise ValueError(f"qtype must be one of {sorted(FORMATS)}, got {qtype!r}")
    n, k = w.shape
    row_bytes(qtype, k)
    if qtype in KFORMATS:
        return QuantWeight(gguf_kquants.quantize(w, qtype), qtype, n, k)
    if qtype in LOW_KFORMATS:
        return QuantWeight(gguf_kquants_low.quantize(w, qtype), qtype, n, k)
    if qtype in FLOAT16:
        kind = torch.float16 if qtype == 1 else torch.bfloat16
        data = w.detach().float().to(kind).contiguous().view(torch.uint8).reshape(n, 2 * k)
        return QuantWeight(data, qtype, n, k)
    x = w.detach().float().reshape(n, k // QK, QK)  # [N, B, 32]
    if qtype == 8:
        d = x.abs().amax(-1) / 127.0
        dh = d.to(torch.float16).float()
        inv = torch.where(dh > 0, 1.0 / dh, torch.zeros_like(dh)).unsqueeze(-1)
        q = (x * inv).round().clamp(-127, 127).to(torch.int8).view(torch.uint8)
        parts = [_f16_bytes(d), q]
    else:
        five = qtype in (6, 7)
        top, mid = (31.0, 16.0) if five else (15.0, 8.0)
        if qtype in (2, 6):  # symmetric: the value of largest magnitude maps to -8 (-16)
            big = x.gather(-1, x.abs().argmax(-1, keepdim=True)).squeeze(-1)
            d, lo = big / -mid, None
        else:
            lo, hi = x.amin(-1), x.amax(-1)
            d = (hi - lo) / top
        dh = d.to(torch.float16).float()
        inv = torch.where(dh != 0, 1.0 / dh, torch.zeros_like(dh)).unsqueeze(-1)
        if lo is None:
            q = (x * inv + mid).round().clamp(0, top)
        else:
            q = ((x - lo.to(torch.float16).float().unsqueeze(-1)) * inv).round().clamp(0, top)
        q = q.to(torch.uint8)
        packed = (q[..., :16] & 15) | ((q[..., 16:] & 15) << 4)
        parts = [_f16_bytes(d)] + ([] if lo is None else [_f16_bytes(lo)])
        if five:  # bit j of a little-endian uint32: value j's bit 4
            shift = torch.arange(8, device=w.device)
            high = (q >> 4).long().reshape(*q.shape[:-1], 4, 8) << shift
            parts.append(high.sum(-1).to(torch.uint8))
        parts.append(packed)
    data = torch.cat(parts, dim=-1).reshape(n, -1).contiguous()
    return QuantWeight(data, qtype, n, k)
