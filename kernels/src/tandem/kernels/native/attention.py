"""Attention over the paged KV cache, and writes into it, in C (``paged_attention.c``),
fp32 on the CPU.

Each entry answers None (``write_kv``: False) where C cannot take the call (the library
is missing, another dtype, a strided cache, sizes beyond the kernel's stack bounds); the
caller then runs the plain-torch kernel.
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from tandem.kernels.decode_inputs import AttentionLayer, DecodeStep
from tandem.kernels.native.contract import struct
from tandem.kernels.native.loader import library

Attention = struct("tandem_attention")
Step = struct("tandem_step")


def attention_args(
    k_cache: Tensor, v_cache: Tensor, heads: int, scale: float, window: int, softcap: float
) -> ctypes.Structure:
    """The C ``tandem_attention`` of a layer: its caches [N, S, KVH, D], ``heads`` query
    heads and its score settings."""
    _, block_size, kv_heads, head_dim = k_cache.shape
    return Attention(
        k_cache.data_ptr(), v_cache.data_ptr(), heads, kv_heads, head_dim, block_size,
        int(window), float(scale), float(softcap),
    )  # fmt: skip


def step_args(
    seq_lens: Tensor,
    tables: Tensor,
    tokens: int,
    cu_seqlens: Tensor | None = None,
    positions: Tensor | None = None,
    cos_sin: Tensor | None = None,
    slots: Tensor | None = None,
) -> ctypes.Structure:
    """The C ``tandem_step``: seq_lens int32 [B], tables int32 [B, M], cu_seqlens int32
    [B + 1], positions and slots int64 [T], cos_sin fp32 [P, D], all contiguous (those a
    kernel does not read may be None)."""
    return Step(
        None if positions is None else positions.data_ptr(),
        None if cos_sin is None else cos_sin.data_ptr(),
        None if slots is None else slots.data_ptr(),
        seq_lens.data_ptr(),
        tables.data_ptr(),
        None if cu_seqlens is None else cu_seqlens.data_ptr(),
        tokens,
        seq_lens.shape[0],
        tables.shape[1],
    )


def paged_decode(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
) -> Tensor | None:
    """Decode attention in C: q [B, H, D] -> [B, H, D]; None where C cannot take the call.

    The arguments must already be validated (``tandem.kernels.ops.attention_checks.check_decode``:
    block ids inside the cache, lengths inside the tables), since C trusts them. It takes
    fp32 CPU tensors with contiguous caches; anything else answers None.
    """
    lib = _library_for(q, k_cache, v_cache)
    if lib is None:
        return None
    B, H = q.shape[:2]
    if B == 0:
        return torch.empty_like(q)
    q = q.contiguous()
    lens = seq_lens.to(torch.int32).contiguous()
    tables = block_tables.to(torch.int32).contiguous()
    out = torch.empty_like(q)
    attn = attention_args(k_cache, v_cache, H, scale, window, softcap)
    step = step_args(lens, tables, B)
    rc = lib.tandem_paged_decode_f32(
        ctypes.byref(attn), ctypes.byref(step), q.data_ptr(), out.data_ptr()
    )
    return out if rc == 0 else None


def paged_prefill(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
) -> Tensor | None:
    """Varlen causal prefill in C over the cache (the new K/V already written):
    q [T, H, D] -> [T, H, D]; None where C cannot take the call. ``window`` > 0: each
    query sees its last ``window`` keys; ``softcap`` > 0: scores soft-capped. Validated arguments
    only (``tandem.kernels.ops.attention_checks.check_prefill``)."""
    lib = _library_for(q, k_cache, v_cache)
    if lib is None:
        return None
    T, H = q.shape[:2]
    if T == 0:
        return torch.empty_like(q)
    q = q.contiguous()
    cu = cu_seqlens_q.to(torch.int32).contiguous()
    lens = seq_lens.to(torch.int32).contiguous()
    tables = block_tables.to(torch.int32).contiguous()
    out = torch.empty_like(q)
    attn = attention_args(k_cache, v_cache, H, scale, window, softcap)
    step = step_args(lens, tables, T, cu_seqlens=cu)
    rc = lib.tandem_paged_prefill_f32(
        ctypes.byref(attn), ctypes.byref(step), q.data_ptr(), out.data_ptr()
    )
    return out if rc == 0 else None


def write_kv(k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor) -> bool:
    """Store k, v: [T, KVH, D] (any token stride) at ``slot_mapping``: [T] in C; False
    (nothing written) where C cannot take the call. Validated slots only
    (``tandem.kernels.ops.cache.check_write``): C trusts them."""
    lib = _library_for(k, k_cache, v_cache)
    if lib is None or v.dtype != torch.float32 or k.dim() != 3 or v.shape != k.shape:
        return False
    T, KVH, D = k.shape
    if any(x.stride(2) != 1 or (KVH > 1 and x.stride(1) != D) for x in (k, v)):
        return False
    if T:
        slots = slot_mapping.to(torch.int64).contiguous()
        lib.tandem_write_kv_f32(
            k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), slots.data_ptr(), T,
            KVH * D, k_cache.data_ptr(), v_cache.data_ptr(),
        )  # fmt: skip
    return True


def rope_decode(
    qkv: Tensor, layer: AttentionLayer, step: DecodeStep, k_cache: Tensor, v_cache: Tensor
) -> Tensor | None:
    """One decode step of a layer's attention in one C call: rope on the q and k heads of
    ``qkv``: [B, (H + 2 KVH) * D] (``layer.heads`` = (H, KVH)), k and v into the caches
    at the step's slots, then each sequence's query over its cache -> [B, H, D]; None (and
    nothing written) where C cannot take the call. Validated arguments only (positions
    inside the rope table, slots, lengths and tables inside the caches:
    ``tandem.kernels.ops.decode_step.check_rope_decode``); C trusts them.
    """
    lib = _library_for(qkv, k_cache, v_cache)
    H, KVH = layer.heads
    B, D = qkv.shape[0], k_cache.shape[3]
    if lib is None or qkv.dim() != 2 or qkv.stride(1) != 1 or qkv.shape[1] != (H + 2 * KVH) * D:
        return None
    if k_cache.shape[2] != KVH:
        return None
    cos_sin = step.cos_sin
    if not _plain_f32(cos_sin) or cos_sin.shape[1] != D or B == 0:
        return None
    pos, slots = _as(step.positions, torch.int64), _as(step.slot_mapping, torch.int64)
    lens, tables = _as(step.seq_lens, torch.int32), _as(step.block_tables, torch.int32)
    out = qkv.new_empty(B, H, D)  # qkv: fp32 on the CPU, checked above
    attn = attention_args(k_cache, v_cache, H, layer.scale, layer.window, layer.softcap)
    args = step_args(lens, tables, B, positions=pos, cos_sin=cos_sin, slots=slots)
    rc = lib.tandem_rope_decode_f32(
        ctypes.byref(attn), ctypes.byref(args), qkv.data_ptr(), qkv.stride(0), out.data_ptr()
    )
    return out if rc == 0 else None


def _as(t: Tensor, dtype: torch.dtype) -> Tensor:
    """``t`` as a contiguous tensor of ``dtype`` (itself when it already is one)."""
    return (t if t.dtype == dtype else t.to(dtype)).contiguous()


def _plain_f32(t: Tensor) -> bool:
    return t.dtype == torch.float32 and t.is_cpu and t.is_contiguous()


def _library_for(q: Tensor, k_cache: Tensor, v_cache: Tensor) -> ctypes.CDLL | None:
    """The library, if loaded and the call has fp32 CPU tensors and contiguous caches."""
    lib = library()
    f32 = torch.float32
    if lib is None or q.dtype != f32 or k_cache.dtype != f32 or v_cache.dtype != f32:
        return None
    if not q.is_cpu or not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        return None
    return lib
