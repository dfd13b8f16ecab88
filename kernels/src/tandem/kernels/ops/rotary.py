"""Neox-style (rotate-half) rotary position embedding."""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.native import elementwise as native
from tandem.kernels.ops.library import call, define


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    # x: [T, H, D]; cos, sin: [T, 1, D/2]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@define("torch_rotary_embedding")
def _rotary_embedding(
    positions: Tensor, q: Tensor, k: Tensor, cos_sin_cache: Tensor
) -> tuple[Tensor, Tensor]:
    r = cos_sin_cache.shape[-1]  # the rotated dims: all of each head's, or its leading ones
    q_done, k_done = (
        native.rotary(positions, q, cos_sin_cache, r),
        native.rotary(positions, k, cos_sin_cache, r),
    )
    if q_done is not None and k_done is not None:  # fp32 on CPU: one pass in C each
        return q_done, k_done
    q, k = q.contiguous(), k.contiguous()  # the elementwise ops are slow on strided views
    half = r // 2
    cs = cos_sin_cache.index_select(0, positions.long())  # [T, R]
    cos = cs[:, None, :half].to(q.dtype)  # [T, 1, R/2]
    sin = cs[:, None, half:].to(q.dtype)
    if r == q.shape[-1]:
        return _rotate(q, cos, sin), _rotate(k, cos, sin)
    return tuple(  # type: ignore[return-value]
        torch.cat((_rotate(x[..., :r], cos, sin), x[..., r:]), dim=-1) for x in (q, k)
    )


@_rotary_embedding.register_fake
def _(positions: Tensor, q: Tensor, k: Tensor, cos_sin_cache: Tensor) -> tuple[Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(k)


def rotary_embedding(
    positions: Tensor, q: Tensor, k: Tensor, cos_sin_cache: Tensor
) -> tuple[Tensor, Tensor]:
    """Rotate q: [T, H, D] and k: [T, KVH, D] by the angles of ``positions``: [T].

    ``cos_sin_cache``: [max_pos, R] holds cos in ``[:, :R/2]`` and sin in ``[:, R/2:]``;
    with R < D (partial rotary) only the leading R of each head rotate, the rest pass.
    Returns new tensors (the inputs are not modified).
    """
    p = checks.tensor("positions", positions, 1, checks.INT_DTYPES)
    qt = checks.tensor("q", q, 3, checks.FLOAT_DTYPES)
    kt = checks.tensor("k", k, 3, (qt.dtype,))
    cache = checks.tensor("cos_sin_cache", cos_sin_cache, 2, checks.FLOAT_DTYPES)
    head = qt.shape[-1]
    if head % 2 != 0:
        raise ValueError(f"q.shape[-1] (head size) must be even, got {head}")
    checks.dim("k", kt, 2, head, "q.shape[-1]")
    checks.dim("q", qt, 0, p.shape[0], "positions.shape[0]")
    checks.dim("k", kt, 0, p.shape[0], "positions.shape[0]")
    rot = cache.shape[1]
    if rot % 2 or not 0 < rot <= head:
        raise ValueError(
            f"cos_sin_cache.shape[1] (the rotated dims) must be even and in (0, {head}] (the "
            f"head size q.shape[-1]), got shape {tuple(cache.shape)}"
        )
    checks.same_device(positions=p, q=qt, k=kt, cos_sin_cache=cache)
    if p.numel() and (int(p.min()) < 0 or int(p.max()) >= cache.shape[0]):
        raise ValueError(
            f"positions must be in [0, {cache.shape[0]}) (cos_sin_cache rows), "
            f"got min {int(p.min())} and max {int(p.max())}"
        )
    return call("torch_rotary_embedding", positions, q, k, cos_sin_cache)
