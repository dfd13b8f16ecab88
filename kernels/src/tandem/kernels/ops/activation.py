"""The gated activations of the MLPs: SiLU-and-mul (SwiGLU) and tanh-GELU-and-mul (GeGLU)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.native import elementwise as native
from tandem.kernels.ops.library import call, define


@define("torch_silu_and_mul")
def _silu_and_mul(x: Tensor) -> Tensor:
    # x: [..., 2I] -> [..., I]
    done = native.silu_and_mul(x)  # fp32 on CPU: one pass in C
    if done is not None:
        return done
    half = x.shape[-1] // 2
    return F.silu(x[..., :half]).mul_(x[..., half:])


@_silu_and_mul.register_fake
def _(x: Tensor) -> Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def silu_and_mul(x: Tensor) -> Tensor:
    """``silu(gate) * up`` where ``x = cat(gate, up)`` on the last dim: [..., 2I] -> [..., I]."""
    xt = checks.tensor("x", x, dtypes=checks.FLOAT_DTYPES)
    if xt.dim() < 1 or xt.shape[-1] % 2 != 0:
        raise ValueError(
            f"x must have an even last dimension [..., 2I], got shape {tuple(xt.shape)}"
        )
    return call("torch_silu_and_mul", x)


@define("torch_gelu_tanh_and_mul")
def _gelu_tanh_and_mul(x: Tensor) -> Tensor:
    # x: [..., 2I] -> [..., I]
    done = native.gelu_tanh_and_mul(x)  # fp32 on CPU: one pass in C
    if done is not None:
        return done
    half = x.shape[-1] // 2
    return F.gelu(x[..., :half], approximate="tanh").mul_(x[..., half:])


@_gelu_tanh_and_mul.register_fake
def _(x: Tensor) -> Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def gelu_tanh_and_mul(x: Tensor) -> Tensor:
    """``gelu_tanh(gate) * up`` where ``x = cat(gate, up)``: [..., 2I] -> [..., I] (GeGLU)."""
    xt = checks.tensor("x", x, dtypes=checks.FLOAT_DTYPES)
    if xt.dim() < 1 or xt.shape[-1] % 2 != 0:
        raise ValueError(
            f"x must have an even last dimension [..., 2I], got shape {tuple(xt.shape)}"
        )
    return call("torch_gelu_tanh_and_mul", x)
