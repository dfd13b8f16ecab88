"""GGUF K-quant super-blocks (Q4_K, Q5_K, Q6_K): the torch dequantizer and a quantizer.

A K-quant row of K values is K / 256 super-blocks of 256. The layouts (GGUF type number,
bytes per super-block):

- ``Q4_K`` (12, 144): f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks
  of 32, 128 bytes of nibbles. Value = d * sc * q - dmin * m, q in 0..15.
- ``Q5_K`` (13, 176): as Q4_K, then 32 bytes of high bits before the nibbles;
  q = nibble + 16 * high bit, in 0..31.
- ``Q6_K`` (14, 210): 128 bytes of low nibbles, 64 bytes of 2-bit pairs, 16 int8 scales
  (one per sub-block of 16), f16 d last. Value = d * sc * (q - 32), q in 0..63.

Where the bits sit (the part the formats leave least obvious):

- Q4_K / Q5_K nibbles: byte 32c + l holds element l of sub-block 2c (low nibble) and of
  sub-block 2c + 1 (high nibble). Q5_K's high bit of element l of sub-block s is bit s
  of high-bit byte l.
- The 6-bit scales: for sub-block j < 4, scale = byte j & 63, min = byte j + 4 & 63; for
  j >= 4 the low 4 bits are in byte j + 4 (scale low nibble, min high nibble) and the top
  2 bits are the top 2 bits of byte j - 4 (scale) and byte j (min).
- Q6_K: each half of 128 values uses 64 nibble bytes and 32 pair bytes. Element l < 32 of
  quarter g (values 32g .. 32g + 31 of the half) takes the low nibble of byte l (g = 0, 1:
  byte l + 32 g) or the high nibble (g = 2, 3: byte l + 32 (g - 2)), and bits 2g, 2g + 1
  of pair byte l as its top two bits.

:func:`dequantize` is the reference the C kernel is tested against; :func:`quantize` makes
valid blocks by a simple round to nearest (tests and checkpoints made here), not the
error-minimising search a production quantizer runs.
"""

from __future__ import annotations

import torch
from torch import Tensor

QK_K = 256
# GGUF type number -> (name, bytes per super-block)
KFORMATS: dict[int, tuple[str, int]] = {12: ("Q4_K", 144), 13: ("Q5_K", 176), 14: ("Q6_K", 210)}


def _half(raw: Tensor) -> Tensor:
    # raw: [..., 2] uint8 -> [...] fp32 (little-endian float16)
    return raw.contiguous().view(torch.float16).squeeze(-1).float()


def _f16_bytes(x: Tensor) -> Tensor:
    # x: [...] fp32 -> [..., 2] uint8
    return x.to(torch.float16).unsqueeze(-1).view(torch.uint8)


def _unpack_scales(raw: Tensor) -> tuple[Tensor, Tensor]:
    """raw: [..., 12] uint8 -> (scales, mins): [..., 8] fp32 each, values 0..63."""
    raw = raw.long()
    a, b, c = raw[..., 0:4], raw[..., 4:8], raw[..., 8:12]
    sc = torch.cat((a & 63, (c & 15) | ((a >> 6) << 4)), dim=-1)
    mn = torch.cat((b & 63, (c >> 4) | ((b >> 6) << 4)), dim=-1)
    return sc.float(), mn.float()


def _pack_scales(sc: Tensor, mn: Tensor) -> Tensor:
    """sc, mn: [..., 8] integers 0..63 -> [..., 12] uint8 (inverse of _unpack_scales)."""
    sc, mn = sc.long(), mn.long()
    a = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    b = mn[..., :4] | ((mn[..., 4:] >> 4) << 6)
    c = (sc[..., 4:] & 15) | ((mn[..., 4:] & 15) << 4)
    return torch.cat((a, b, c), dim=-1).to(torch.uint8)


def _nibble_planes(qs: Tensor) -> Tensor:
    """qs: [..., 128] uint8 -> [..., 8, 32] low 4 bits of each sub-block's values."""
    chunks = qs.reshape(*qs.shape[:-1], 4, 1, 32)  # [..., 4 chunks, 1, 32]
    both = torch.cat((chunks & 15, chunks >> 4), dim=-2)  # [..., 4, 2, 32]
    return both.reshape(*qs.shape[:-1], 8, 32)


def _dequant_q45(blocks: Tensor, five: bool) -> Tensor:
    # blocks: [N, S, 144 | 176] -> [N, S, 256]
    d = _half(blocks[..., 0:2]).unsqueeze(-1)  # [N, S, 1]
    dmin = _half(blocks[..., 2:4]).unsqueeze(-1)
    sc, mn = _unpack_scales(blocks[..., 4:16])  # [N, S, 8]
    q = _nibble_planes(blocks[..., -128:]).float()  # [N, S, 8, 32]
    if five:
        qh = blocks[..., 16:48].long().unsqueeze(-2)  # [N, S, 1, 32]
        shift = torch.arange(8, device=blocks.device).reshape(8, 1)
        q = q + 16.0 * ((qh >> shift) & 1).float()
    values = (d * sc).unsqueeze(-1) * q - (dmin * mn).unsqueeze(-1)
    return values.flatten(-2)


def _dequant_q6(blocks: Tensor) -> Tensor:
    # blocks: [N, S, 210] -> [N, S, 256]
    lead = blocks.shape[:-1]
    ql = blocks[..., 0:128].reshape(*lead, 2, 2, 32).long()  # [N, S, half, 2, 32]
    qh = blocks[..., 128:192].reshape(*lead, 2, 1, 32).long()  # [N, S, half, 1, 32]
    sc = blocks[..., 192:208].contiguous().view(torch.int8).float()  # [N, S, 16]
    d = _half(blocks[..., 208:210]).unsqueeze(-1)  # [N, S, 1]
    low = torch.cat((ql & 15, ql >> 4), dim=-2)  # [N, S, half, 4 quarters, 32]
    shift = 2 * torch.arange(4, device=blocks.device).reshape(4, 1)
    q = low | (((qh >> shift) & 3) << 4)  # [N, S, 2, 4, 32]
    scale = (d * sc).reshape(*lead, 16, 1)  # one per sub-block of 16
    return (scale * (q.reshape(*lead, 16, 16).float() - 32.0)).flatten(-2)


def dequantize(data: Tensor, qtype: int, k: int) -> Tensor:
    """data: [N, K / 256 * block bytes] uint8 -> [N, k] fp32."""
    size = KFORMATS[qtype][1]
    blocks = data.reshape(data.shape[0], k // QK_K, size)  # [N, S, size]
    values = _dequant_q6(blocks) if qtype == 14 else _dequant_q45(blocks, five=qtype == 13)
    return values.reshape(data.shape[0], k)


def _code(x: Tensor, top: float) -> tuple[Tensor, Tensor]:
    """x >= 0 [...] -> (f16 scale of the top code, codes in 0..top: round(x / scale))."""
    scale = (x.amax(-1) / top).to(torch.float16).float()  # [...]
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale)).unsqueeze(-1)
    return scale, (x * inv).round().clamp(0, top)


def _quant_q45(x: Tensor, five: bool) -> Tensor:
    # x: [N, S, 8, 32] -> [N, S, 144 | 176] uint8
    top = 31.0 if five else 15.0
    lo = x.amin(-1).clamp(max=0.0)  # [N, S, 8]: each sub-block's range includes 0
    step = (x.amax(-1) - lo) / top
    d, sc = _code(step, 63.0)  # [N, S], [N, S, 8]
    dmin, mn = _code(-lo, 63.0)
    wstep = (d.unsqueeze(-1) * sc).unsqueeze(-1)  # [N, S, 8, 1]: the scales as stored
    wmin = (dmin.unsqueeze(-1) * mn).unsqueeze(-1)
    inv = torch.where(wstep > 0, 1.0 / wstep, torch.zeros_like(wstep))
    q = ((x + wmin) * inv).round().clamp(0, top).to(torch.uint8)  # [N, S, 8, 32]
    low = q & 15
    qs = (low[..., 0::2, :] | (low[..., 1::2, :] << 4)).flatten(-2)  # [N, S, 128]
    parts = [_f16_bytes(d), _f16_bytes(dmin), _pack_scales(sc, mn)]
    if five:
        shift = torch.arange(8, device=x.device).reshape(8, 1)
        bits = ((q >> 4).long() << shift).sum(-2)  # [N, S, 32]: bit s from sub-block s
        parts.append(bits.to(torch.uint8))
    return torch.cat([*parts, qs], dim=-1)


def _quant_q6(x: Tensor) -> Tensor:
    # x: [N, S, 256] -> [N, S, 210] uint8
    lead = x.shape[:-1]
    sub = x.reshape(*lead, 16, 16)
    step = sub.abs().amax(-1) / 31.0  # [N, S, 16]
    d = (step.amax(-1) / 127.0).to(torch.float16).float()  # [N, S]
    inv_d = torch.where(d > 0, 1.0 / d, torch.zeros_like(d)).unsqueeze(-1)
    sc = (step * inv_d).round().clamp(0, 127)  # [N, S, 16]
    wstep = (d.unsqueeze(-1) * sc).unsqueeze(-1)  # [N, S, 16, 1]
    inv = torch.where(wstep > 0, 1.0 / wstep, torch.zeros_like(wstep))
    q = (sub * inv + 32.0).round().clamp(0, 63).to(torch.uint8)  # [N, S, 16, 16]
    q = q.reshape(*lead, 2, 4, 32)  # [N, S, half, quarter, 32]
    low, high = q & 15, q >> 4
    ql = (low[..., 0:2, :] | (low[..., 2:4, :] << 4)).reshape(*lead, 128)
    qh = high[..., 0, :] | (high[..., 1, :] << 2) | (high[..., 2, :] << 4) | (high[..., 3, :] << 6)
    scales = sc.to(torch.int8).view(torch.uint8)
    return torch.cat((ql, qh.reshape(*lead, 64), scales, _f16_bytes(d)), dim=-1)


def quantize(w: Tensor, qtype: int) -> Tensor:
    """w: [N, K] float (K a multiple of 256) -> [N, K / 256 * block bytes] uint8."""
    n, k = w.shape
    x = w.detach().float().reshape(n, k // QK_K, QK_K)  # [N, S, 256]
    if qtype == 14:
        blocks = _quant_q6(x)
    else:
        blocks = _quant_q45(x.reshape(n, k // QK_K, 8, 32), five=qtype == 13)
    return blocks.reshape(n, -1).contiguous()
