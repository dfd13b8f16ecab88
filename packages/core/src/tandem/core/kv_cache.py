"""Sizing and allocating the paged KV cache: per layer ``(k_cache, v_cache)``.

On the CPU the caches live in one anonymous memory map: the kernel hands out zeroed
pages on first touch, so allocating a 1 GiB cache costs microseconds instead of the
second or so a ``torch.zeros`` memset takes, and blocks never used never take memory.
Huge pages are requested where the platform allows (``MADV_HUGEPAGE``), which keeps
the first-touch cost of a page about that of a plain write.
"""

from __future__ import annotations

import contextlib
import mmap

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
    layers = _positive("num_layers", num_layers)
    if torch.device(device).type == "cpu":
        flat = _zeroed_cpu(2 * layers * _numel(shape), dtype)
        both = flat.view(layers, 2, *shape)  # [L, 2, blocks, block_size, H_kv, D]
        return [(both[i, 0], both[i, 1]) for i in range(layers)]
    return [
        (
            torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros(shape, dtype=dtype, device=device),
        )
        for _ in range(layers)
    ]


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def _zeroed_cpu(numel: int, dtype: torch.dtype) -> Tensor:
    """A flat zeroed CPU tensor backed by an anonymous map (pages zeroed lazily by the OS)."""
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    try:
        buf = mmap.mmap(-1, nbytes, flags=flags) if flags else mmap.mmap(-1, nbytes)
    except (OSError, ValueError):
        return torch.zeros(numel, dtype=dtype)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):  # huge pages are an optimisation only
            buf.madvise(mmap.MADV_HUGEPAGE)
    # the tensor holds a reference to ``buf``: the map lives as long as any view of it
    return torch.frombuffer(buf, dtype=dtype, count=numel)
