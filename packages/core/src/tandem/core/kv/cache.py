"""Sizing and allocating the paged KV cache: per layer ``(k_cache, v_cache)``.

On the CPU the caches live in one anonymous memory map. Up to :data:`POPULATE_BYTES` its
pages are faulted in at allocation (``MADV_POPULATE_WRITE``, one system call, ~0.3 s per
GiB here): left to fault in on first touch, they cost the first long batch about 0.4 s
per 400 MB in scattered faults inside the K/V writes (and over 1 s with huge pages, whose
faults wait on memory compaction; none are asked for). A larger cache (one sized from the
machine's memory) is left to fault in as blocks are first written, so that a short run
does not pay seconds of start-up and gigabytes of resident memory for blocks it never
uses; its zero pages cost nothing until then. Where the kernel lacks
``MADV_POPULATE_WRITE`` (Linux < 5.14) the pages fault in lazily.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tandem.core.kv.budget import block_bytes
from tandem.kernels.memory import mapped_zeros

POPULATE_BYTES = 1 << 30  # caches up to this size are faulted in at allocation


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
    return block_bytes(
        _positive("num_layers", num_layers),
        _positive("num_kv_heads", num_kv_heads),
        _positive("head_dim", head_dim),
        _positive("block_size", block_size),
        torch.empty((), dtype=_dtype(dtype)).element_size(),
    )


def allocate_kv_caches(
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    num_blocks: int | Sequence[int],
    block_size: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> list[tuple[Tensor, Tensor]]:
    """Zeroed caches, each ``[num_blocks, block_size, num_kv_heads, head_dim]``;
    ``num_blocks`` may give each layer its own count (layers with a pool of their own)."""
    layers = _positive("num_layers", num_layers)
    counts = [num_blocks] * layers if isinstance(num_blocks, int) else list(num_blocks)
    if len(counts) != layers:
        raise ValueError(f"num_blocks must give one count per layer ({layers}), got {len(counts)}")
    rest = (
        _positive("block_size", block_size),
        _positive("num_kv_heads", num_kv_heads),
        _positive("head_dim", head_dim),
    )
    shapes = [(_positive("num_blocks", n), *rest) for n in counts]
    dtype = _dtype(dtype)
    if torch.device(device).type == "cpu":
        numel = 2 * sum(_numel(shape) for shape in shapes)
        populate = numel * dtype.itemsize <= POPULATE_BYTES  # the whole map, or none of it
        flat = mapped_zeros((numel,), dtype, populate=populate, huge=False)
        out, at = [], 0
        for shape in shapes:  # [2, blocks, block_size, H_kv, D] of each layer in turn
            n = _numel(shape)
            both = flat[at : at + 2 * n].view(2, *shape)
            out.append((both[0], both[1]))
            at += 2 * n
        return out
    return [
        (
            torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros(shape, dtype=dtype, device=device),
        )
        for shape in shapes
    ]


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out
