"""Sizing and allocating the paged KV cache: per layer ``(k_cache, v_cache)``."""

from __future__ import annotations

import torch
from torch import Tensor


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def _dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    return dtype


def kv_cache_bytes_per_block(
    num_layers: int, num_kv_heads: int, head_dim: int, block_size: int, dtype: torch.dtype
) -> int:
    """Bytes one block takes across all layers, keys and values together."""
    per_layer = (
        _positive("num_kv_heads", num_kv_heads)
        * _positive("head_dim", head_dim)
        * _positive("block_size", block_size)
    )
    item = torch.empty((), dtype=_dtype(dtype)).element_size()
    return 2 * _positive("num_layers", num_layers) * per_layer * item


def allocate_kv_caches(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    num_blocks: int,
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> list[tuple[Tensor, Tensor]]:
    """Zeroed caches, each ``[num_blocks, block_size, num_kv_heads, head_dim]``."""
    shape = (
        _positive("num_blocks", num_blocks),
        _positive("block_size", block_size),
        _positive("num_kv_heads", num_kv_heads),
        _positive("head_dim", head_dim),
    )
    dtype = _dtype(dtype)
    return [
        (
            torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros(shape, dtype=dtype, device=device),
        )
        for _ in range(_positive("num_layers", num_layers))
    ]
