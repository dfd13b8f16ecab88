"""GGUF 2- and 3-bit K-quant super-blocks (Q2_K, Q3_K): the torch dequantizer and a quantizer.

Both hold 256 values in 16 sub-blocks of 16, each with its own small integer scale. The
layouts (GGUF type number, bytes per super-block):

- ``Q2_K`` (10, 84): 16 bytes of scales (low nibble: the sub-block's scale sc, high
  nibble: its min m), 64 bytes of 2-bit codes, f16 d, f16 dmin.
  Value = d * sc * q - dmin * m, q in 0..3.
- ``Q3_K`` (11, 110): 32 bytes of high bits, 64 bytes of 2-bit codes, 12 bytes of 6-bit
  scales, f16 d. Value = d * (s - 32) * (q - 4), q in 0..7 (s in 0..63).

Where the bits sit:

- The 2-bit codes (both formats): each half of 128 values uses 32 bytes; element l of
  quarter g of half h (value 128 h + 32 g + l) is bits 2g, 2g + 1 of byte 32 h + l.
- Q3_K's third bit of value 32 j + l (j = 0..7) is bit j of high-bit byte l. The code is
  the two low bits plus 4 times that bit; the file's reference speaks of a bit that is
  *cleared* subtracting 4, which is the same number.
- Q3_K's 6-bit scale of sub-block j: its low 4 bits are the low nibble of byte j (j < 8)
  or the high nibble of byte j - 8; its top 2 bits are bits 2 (j / 4), 2 (j / 4) + 1 of
  byte 8 + j % 4.

:func:`dequantize` is the reference the C kernels are tested against (as the ``gguf``
package's, value for value); :func:`quantize` makes valid blocks by a plain round to
nearest (the ``gguf`` package has no quantizer for these), for tests and benchmarks.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels.gguf_kquants import QK_K, _code, _f16_bytes, _half

# GGUF type number -> (name, bytes per super-block)
LOW_KFORMATS: dict[int, tuple[str, int]] = {10: ("Q2_K", 84), 11: ("Q3_K", 110)}


def _two_bit_codes(qs: Tensor) -> Tensor:
    """qs: [..., 64] uint8 -> [..., 16, 16] codes 0..3 (sub-block, element), as int64."""
    lead = qs.shape[:-1]
    shift = 2 * torch.arange(4, device=qs.device).reshape(4, 1)
    codes = (qs.reshape(*lead, 2, 1, 32).long() >> shift) & 3  # [..., half, quarter, 32]
    return codes.reshape(*lead, 16, 16)


def _q3_scales(raw: Tensor) -> Tensor:
    """raw: [..., 12] uint8 -> [..., 16] the signed scales s - 32, as int64."""
    raw = raw.long()
    low = torch.cat((raw[..., 0:8] & 15, raw[..., 0:8] >> 4), dim=-1)  # [..., 16]
    shift = 2 * torch.arange(4, device=raw.device).reshape(4, 1)
    top = ((raw[..., 8:12].unsqueeze(-2) >> shift) & 3).flatten(-2)  # index 4 (j / 4) + j % 4
    return (low | (top << 4)) - 32


def _dequant_q2(blocks: Tensor) -> Tensor:
    # blocks: [N, S, 84] -> [N, S, 256]
    sc = blocks[..., 0:16].long()
    d = _half(blocks[..., 80:82]).unsqueeze(-1)  # [N, S, 1]
    dmin = _half(blocks[..., 82:84]).unsqueeze(-1)
    scale = (d * (sc & 15).float()).unsqueeze(-1)  # [N, S, 16, 1]
    low = (dmin * (sc >> 4).float()).unsqueeze(-1)
    return (scale * _two_bit_codes(blocks[..., 16:80]).float() - low).flatten(-2)


def _dequant_q3(blocks: Tensor) -> Tensor:
    # blocks: [N, S, 110] -> [N, S, 256]
    lead = blocks.shape[:-1]
    shift = torch.arange(8, device=blocks.device).reshape(8, 1)
    high = ((blocks[..., 0:32].long().unsqueeze(-2) >> shift) & 1).reshape(*lead, 16, 16)
    q = _two_bit_codes(blocks[..., 32:96]) + 4 * high - 4  # [N, S, 16, 16] in -4..3
    d = _half(blocks[..., 108:110]).unsqueeze(-1)  # [N, S, 1]
    scale = (d * _q3_scales(blocks[..., 96:108]).float()).unsqueeze(-1)  # [N, S, 16, 1]
    return (scale * q.float()).flatten(-2)


def dequantize(data: Tensor, qtype: int, k: int) -> Tensor:
    """data: [N, K / 256 * block bytes] uint8 -> [N, k] fp32."""
    size = LOW_KFORMATS[qtype][1]
    blocks = data.reshape(data.shape[0], k // QK_K, size)  # [N, S, size]
    values = _dequant_q2(blocks) if qtype == 10 else _dequant_q3(blocks)
    return values.reshape(data.shape[0], k)


def _pack_two_bit(q: Tensor) -> Tensor:
    """q: [..., 16, 16] codes (their low 2 bits are kept) -> [..., 64] uint8."""
    lead = q.shape[:-2]
    quarters = (q.long() & 3).reshape(*lead, 2, 4, 32)  # [..., half, quarter, 32]
    shift = 2 * torch.arange(4, device=q.device).reshape(4, 1)
    return (quarters << shift).sum(-2).reshape(*lead, 64).to(torch.uint8)


def _quant_q2(x: Tensor) -> Tensor:
    # x: [N, S, 16, 16] -> [N, S, 84] uint8
    lo = x.amin(-1).clamp(max=0.0)  # [N, S, 16]: each sub-block's range includes 0
    d, sc = _code((x.amax(-1) - lo) / 3.0, 15.0)  # [N, S], [N, S, 16]
    dmin, mn = _code(-lo, 15.0)
    step = (d.unsqueeze(-1) * sc).unsqueeze(-1)  # [N, S, 16, 1]: the scales as stored
    inv = torch.where(step > 0, 1.0 / step, torch.zeros_like(step))
    q = ((x + (dmin.unsqueeze(-1) * mn).unsqueeze(-1)) * inv).round().clamp(0, 3)
    scales = (sc.long() | (mn.long() << 4)).to(torch.uint8)
    return torch.cat((scales, _pack_two_bit(q), _f16_bytes(d), _f16_bytes(dmin)), dim=-1)


def _quant_q3(x: Tensor) -> Tensor:
    # x: [N, S, 16, 16] -> [N, S, 110] uint8
    lead = x.shape[:-2]
    # each sub-block's value of largest magnitude maps to code -4: a signed step
    big = x.gather(-1, x.abs().argmax(-1, keepdim=True)).squeeze(-1)  # [N, S, 16]
    step = big / -4.0
    d = (step.abs().amax(-1) / 31.0).to(torch.float16).float()  # [N, S]
    inv_d = torch.where(d > 0, 1.0 / d, torch.zeros_like(d)).unsqueeze(-1)
    s = (step * inv_d).round().clamp(-32, 31)  # [N, S, 16]
    wstep = (d.unsqueeze(-1) * s).unsqueeze(-1)  # [N, S, 16, 1]
    inv = torch.where(wstep != 0, 1.0 / wstep, torch.zeros_like(wstep))
    u = ((x * inv).round().clamp(-4, 3) + 4).long()  # [N, S, 16, 16] in 0..7
    shift = torch.arange(8, device=x.device).reshape(8, 1)
    high = ((u >> 2).reshape(*lead, 8, 32) << shift).sum(-2).to(torch.uint8)  # [N, S, 32]
    six = (s.long() + 32).reshape(*lead, 16)
    low = six & 15
    nibbles = low[..., 0:8] | (low[..., 8:16] << 4)  # [N, S, 8]
    top = (six >> 4).reshape(*lead, 4, 4) << (2 * torch.arange(4, device=x.device)).reshape(4, 1)
    scales = torch.cat((nibbles, top.sum(-2)), dim=-1).to(torch.uint8)  # [N, S, 12]
    return torch.cat((high, _pack_two_bit(u), scales, _f16_bytes(d)), dim=-1)


def quantize(w: Tensor, qtype: int) -> Tensor:
    """w: [N, K] float (K a multiple of 256) -> [N, K / 256 * block bytes] uint8."""
    n, k = w.shape
    x = w.detach().float().reshape(n, k // QK_K, 16, 16)  # [N, S, sub-block, 16]
    blocks = _quant_q2(x) if qtype == 10 else _quant_q3(x)
    return blocks.reshape(n, -1).contiguous()
