"""RMSNorm and its fused residual-add variant."""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.native import elementwise as native
from tandem.kernels.ops.library import call, define


def _normalize(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # x: [..., C] -> [..., C]; statistics in fp32 whatever the input dtype
    xf = x.float()
    inv = xf.square().mean(-1, keepdim=True).add_(eps).rsqrt_()
    return (xf * inv).to(x.dtype) * weight


@define("torch_rms_norm")
def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    done = native.add_rms_norm(x, None, weight, eps)  # fp32 on CPU: one pass in C
    return _normalize(x, weight, eps) if done is None else done[0]


@_rms_norm.register_fake
def _(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x.new_empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype))


@define("torch_fused_add_rms_norm")
def _fused_add_rms_norm(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    done = native.add_rms_norm(x, residual, weight, eps)  # fp32 on CPU: one pass in C
    if done is not None:
        return done
    summed = x + residual
    return _normalize(summed, weight, eps), summed


@_fused_add_rms_norm.register_fake
def _(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    summed_dtype = torch.promote_types(x.dtype, residual.dtype)
    out_dtype = torch.promote_types(summed_dtype, weight.dtype)
    return x.new_empty(x.shape, dtype=out_dtype), x.new_empty(x.shape, dtype=summed_dtype)


def _check(x: object, weight: object, eps: object) -> None:
    xt = checks.tensor("x", x, dtypes=checks.FLOAT_DTYPES)
    if xt.dim() < 1:
        raise ValueError("x must have at least 1 dimension [..., C], got a 0-d tensor")
    w = checks.tensor("weight", weight, 1, checks.FLOAT_DTYPES)
    checks.dim("weight", w, 0, xt.shape[-1], "x.shape[-1]")
    checks.same_device(x=xt, weight=w)
    checks.number("eps", eps, positive=True)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim. x: [..., C]; weight: [C]."""
    _check(x, weight, eps)
    return call("torch_rms_norm", x, weight, float(eps))


def fused_add_rms_norm(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    """Return ``(rms_norm(x + residual), x + residual)``; the sum is the next residual."""
    _check(x, weight, eps)
    r = checks.tensor("residual", residual, dtypes=checks.FLOAT_DTYPES)
    if r.shape != x.shape:
        raise ValueError(
            f"residual must have the shape of x {tuple(x.shape)}, got {tuple(r.shape)}"
        )
    checks.same_device(x=x, residual=r)
    return call("torch_fused_add_rms_norm", x, residual, weight, float(eps))
