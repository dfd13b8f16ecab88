"""A decode-stack layer's latent attention (``decode_latent.c``) as the C table takes it:
:class:`LatentBlock` holds its weights and sizes, :func:`fill` writes them into the
layer's ``tandem_latent``."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from tandem.kernels.native.latent import shape_args


@dataclass(frozen=True, slots=True)
class LatentBlock:
    """``dims``: (heads, nope, rope, value, rank); ``q_a`` and ``q_a_norm``: q's own
    latent projection and its norm (None: q straight from the hidden state; the layer's
    ``qkv`` entry is q's projection either way); ``kv_a`` (hidden -> rank + rope) and its
    norm over the rank; ``kv_b`` fp32 [heads (nope + value), rank], contiguous. Each
    LinSpec is of the decode stack's (``decode_stack.LinSpec``)."""

    dims: tuple[int, int, int, int, int]
    q_a: object | None
    q_a_norm: Tensor | None
    kv_a: object
    kv_a_norm: Tensor
    kv_b: Tensor

    def __post_init__(self) -> None:
        h, n, p, v, r = self.dims
        if min(self.dims) <= 0:
            raise ValueError(f"LatentBlock.dims must all be > 0, got {self.dims}")
        if (r + p) % 2:
            raise ValueError(f"LatentBlock.dims: rank + rope must be even, got {r + p}")
        if tuple(self.kv_b.shape) != (h * (n + v), r):
            raise ValueError(
                f"LatentBlock.kv_b must be [{h * (n + v)}, {r}], got {tuple(self.kv_b.shape)}"
            )
        if (self.q_a is None) != (self.q_a_norm is None):
            raise ValueError("LatentBlock.q_a and q_a_norm come together (or neither)")

    def floats(self) -> int:
        """Scratch floats a token of the block takes (decode_latent.c's regions)."""
        h, n, p, v, r = self.dims
        w = r + p
        q_rank = 0 if self.q_a is None else self.q_a.n
        return q_rank + h * (n + p) + w + r + 2 * h * p + p + w + h * w + h * r + h * v

    def linears(self) -> list:
        return [lin for lin in (self.q_a, self.kv_a) if lin is not None]


def fill(
    row: ctypes.Structure, block: LatentBlock, lin: Callable[[object], ctypes.Structure]
) -> None:
    """Write ``block`` into ``row`` (a ``tandem_latent``); ``lin`` makes a LinSpec's C
    entry."""
    row.shape = shape_args(block.dims)
    if block.q_a is not None:
        row.q_a = lin(block.q_a)
        row.q_a_norm = block.q_a_norm.data_ptr()
    row.kv_a = lin(block.kv_a)
    row.kv_a_norm = block.kv_a_norm.data_ptr()
    row.kv_b = block.kv_b.data_ptr()
