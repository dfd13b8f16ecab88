"""Input validation shared by the public kernel entry points.

Every helper raises ``TypeError`` for a wrong kind of value and ``ValueError`` for a
wrong shape, dtype or range, naming the field, what is allowed and what was given.
The checks look at metadata only (no device synchronisation) unless stated.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

INT_DTYPES = (torch.int32, torch.int64)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def tensor(
    name: str,
    value: object,
    ndim: int | None = None,
    dtypes: tuple[torch.dtype, ...] | None = None,
) -> Tensor:
    """Check that ``value`` is a tensor of ``ndim`` dimensions and one of ``dtypes``."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(
            f"{name} must have {ndim} dimensions, got {value.dim()} (shape {tuple(value.shape)})"
        )
    if dtypes is not None and value.dtype not in dtypes:
        raise ValueError(f"{name} must have dtype in ({_names(dtypes)}), got {value.dtype}")
    return value


def dim(name: str, value: Tensor, axis: int, expected: int, what: str) -> None:
    """Check ``value.shape[axis] == expected`` where ``what`` says where expected comes from."""
    if value.shape[axis] != expected:
        raise ValueError(
            f"{name}.shape[{axis}] must equal {what} ({expected}), got shape {tuple(value.shape)}"
        )


def same_device(**tensors: Tensor) -> None:
    if all(t.is_cpu for t in tensors.values()):  # the common case, without device objects
        return
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        found = ", ".join(f"{n}={d}" for n, d in devices.items())
        raise ValueError(f"all tensors must be on one device, got {found}")


def number(name: str, value: object, positive: bool = False) -> float:
    """Check a real number (bool is refused); optionally strictly positive and finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    if positive and not (0.0 < float(value) < float("inf")):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def integer(name: str, value: object, low: int, high: int | None = None) -> int:
    """Check a Python int (bool is refused) in ``[low, high)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value >= high):
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {bound}, got {value}")
    return value


def heads(q_name: str, q_heads: int, kv_name: str, kv_heads: int) -> None:
    if kv_heads < 1 or q_heads % kv_heads != 0:
        raise ValueError(
            f"{q_name} heads ({q_heads}) must be a multiple of {kv_name} heads ({kv_heads})"
        )


def paged_cache(k_cache: object, v_cache: object) -> tuple[Tensor, Tensor]:
    """Check a pair of paged caches ``[N, S, KVH, D]`` of the same shape and dtype."""
    kc = tensor("k_cache", k_cache, 4, FLOAT_DTYPES)
    vc = tensor("v_cache", v_cache, 4, FLOAT_DTYPES)
    if kc.shape != vc.shape or kc.dtype != vc.dtype:
        raise ValueError(
            "v_cache must match k_cache in shape and dtype, got "
            f"k_cache {tuple(kc.shape)} {kc.dtype} and v_cache {tuple(vc.shape)} {vc.dtype}"
        )
    return kc, vc


def seq_lens_fit(seq_lens: Tensor, block_tables: Tensor, block_size: int, low: int) -> None:
    """Check ``low <= seq_lens <= capacity of a block-table row`` (reads the values)."""
    if seq_lens.numel() == 0:
        return
    capacity = block_tables.shape[1] * block_size
    lo, hi = int(seq_lens.min()), int(seq_lens.max())
    if lo < low or hi > capacity:
        raise ValueError(
            f"seq_lens must be in [{low}, {capacity}] (block_tables width "
            f"{block_tables.shape[1]} x block size {block_size}), got min {lo} and max {hi}"
        )
