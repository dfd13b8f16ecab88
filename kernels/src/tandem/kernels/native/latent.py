"""Multi-head latent attention's steps in C (``latent.c``), fp32 on the CPU: the query
taken into the latent's basis, attention over the cached latent rows, the attended latent
taken out to each head's values. The module path (``LatentAttention``) and the decode
stack both run these, so their numbers are the same.

Each entry answers None where C cannot take the call (no library, not fp32 on the CPU,
not contiguous, a cache block of more than 256 tokens); the caller runs its torch code.
Inputs are validated by the caller (C trusts the tables and lengths).
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from tandem.kernels.native.attention import attention_args, step_args
from tandem.kernels.native.contract import constant, struct
from tandem.kernels.native.loader import library

Shape = struct("tandem_latent_shape")
MAX_BLOCK = constant("TANDEM_LATENT_MAX_BLOCK")  # latent.c's bound on a block's tokens
Dims = tuple[int, int, int, int, int]  # heads, nope, rope, value, rank


def _plain(*tensors: Tensor) -> bool:
    return all(t.dtype == torch.float32 and t.is_cpu and t.is_contiguous() for t in tensors)


def available() -> bool:
    lib = library()
    return lib is not None and hasattr(lib, "tandem_latent_attend_f32")


def shape_args(dims: Dims) -> ctypes.Structure:
    """The C ``tandem_latent_shape`` of (heads, nope, rope, value, rank)."""
    return Shape(*dims)


def query(q: Tensor, kv_b: Tensor, dims: Dims) -> Tensor | None:
    """q [T, H (N + P)] (each head's non-rotary then rotary dims) -> [T, H, R + P] whose
    first R of each head hold q_nope @ kv_b's key rows of the head (the rest unset)."""
    h, n, p, v, r = dims
    if not available() or not _plain(q, kv_b) or q.dim() != 2 or q.shape[1] != h * (n + p):
        return None
    if kv_b.shape != (h * (n + v), r):
        return None
    out = q.new_empty(q.shape[0], h, r + p)
    if q.shape[0]:
        library().tandem_latent_query_f32(
            ctypes.byref(shape_args(dims)), q.data_ptr(), kv_b.data_ptr(), q.shape[0],
            out.data_ptr(),
        )  # fmt: skip
    return out


def value(o_lat: Tensor, kv_b: Tensor, dims: Dims) -> Tensor | None:
    """o_lat [T, H, R] -> [T, H V]: each head's attended latent through its value rows."""
    h, n, _, v, r = dims
    if not available() or not _plain(o_lat, kv_b) or o_lat.shape[1:] != (h, r):
        return None
    if kv_b.shape != (h * (n + v), r):
        return None
    out = o_lat.new_empty(o_lat.shape[0], h * v)
    if o_lat.shape[0]:
        library().tandem_latent_value_f32(
            ctypes.byref(shape_args(dims)), o_lat.data_ptr(), kv_b.data_ptr(), o_lat.shape[0],
            out.data_ptr(),
        )  # fmt: skip
    return out


def attend(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    cu_seqlens: Tensor | None,
    scale: float,
    rank: int,
) -> Tensor | None:
    """q [T, H, W] over the cached rows -> [T, H, rank]: one token a sequence
    (``cu_seqlens`` None), or each sequence's tokens ``cu_seqlens[b]:cu_seqlens[b + 1]``
    over their causal prefixes (validated)."""
    if not available() or not _plain(q, k_cache, v_cache) or q.dim() != 3:
        return None
    if k_cache.shape[1] > MAX_BLOCK or not 0 < rank <= q.shape[2]:
        return None
    t, h, _ = q.shape
    out = q.new_empty(t, h, rank)
    if t == 0:
        return out
    lens = seq_lens.to(torch.int32).contiguous()
    tables = block_tables.to(torch.int32).contiguous()
    cu = None if cu_seqlens is None else cu_seqlens.to(torch.int32).contiguous()
    attn = attention_args(k_cache, v_cache, h, scale, 0, 0.0)
    step = step_args(lens, tables, t, cu)
    rc = library().tandem_latent_attend_f32(
        ctypes.byref(attn), ctypes.byref(step), q.data_ptr(), rank, out.data_ptr()
    )
    return out if rc == 0 else None
