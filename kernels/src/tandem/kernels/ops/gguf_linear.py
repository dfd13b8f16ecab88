"""``tandem::torch_linear_gguf``: x @ W^T with W kept as the GGUF file stores it (Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1, the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and F16 / BF16).

On the CPU the C kernel (``native/linear_gguf.c``) reads the blocks directly: the
activations are quantized per 32 values to int8 and every block's dot product is an
integer one, so a decode step streams the weights' file bytes once (a Q4_1 weight is
0.625 bytes a value, fp32's 4). F16 / BF16 rows are widened to fp32 as they are read and
multiply x as it is (``native/gguf_half.c``: two bytes a value, and the numbers of
``F.linear(x, w.float())``). From ``native.linear_gguf.PREFILL_ROWS`` rows (prefill)
``native/linear_gguf_f32.c`` decodes the weights to fp32 tiles once per call and runs fp32
products on x rounded the same way (:mod:`tandem.kernels.native.linear_gguf`). Elsewhere,
or where C is missing, the reference runs: dequantize
(:func:`tandem.kernels.gguf_blocks.dequantize`), then ``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.gguf_blocks import FORMATS, QuantStack, QuantWeight, dequantize, row_bytes
from tandem.kernels.native import linear_gguf as native
from tandem.kernels.ops.library import call, define


def reference(x: Tensor, data: Tensor, qtype: int, k: int) -> Tensor:
    """The op's meaning: dequantize every block to fp32, then multiply. [M, k] -> [M, N]."""
    return F.linear(x.float(), dequantize(data, qtype, k).to(x.device))


@define("torch_linear_gguf")
def _linear_gguf(x: Tensor, data: Tensor, qtype: int, k: int) -> Tensor:
    done = native.linear(x, data, qtype, k)  # None off the CPU
    return reference(x, data, qtype, k) if done is None else done


@_linear_gguf.register_fake
def _(x: Tensor, data: Tensor, qtype: int, k: int) -> Tensor:
    return x.new_empty((x.shape[0], data.shape[0]), dtype=torch.float32)


def linear_gguf(x: Tensor, weight: QuantWeight | QuantStack) -> Tensor:
    """x: [..., k] float -> [..., n] fp32, ``weight`` in its GGUF blocks (a stack: each
    part's columns in turn)."""
    if type(weight) is QuantStack:
        return torch.cat([linear_gguf(x, part) for part in weight.parts], dim=-1)
    if (
        type(weight) is QuantWeight
        and type(x) is Tensor
        and x.dtype == torch.float32
        and x.dim() == 2
        and x.shape[1] == weight.k
    ):  # a model's own call, once per layer and token: nothing more to check
        return call("torch_linear_gguf", x, weight.data, weight.qtype, weight.k)
    xt = checks.tensor("x", x, dtypes=checks.FLOAT_DTYPES)
    if not isinstance(weight, QuantWeight):
        raise TypeError(f"weight must be a QuantWeight or QuantStack, got {type(weight).__name__}")
    if xt.dim() < 1 or xt.shape[-1] != weight.k:
        raise ValueError(f"x must have shape [..., {weight.k}], got {list(xt.shape)}")
    lead = xt.shape[:-1]
    flat = xt.reshape(-1, weight.k)
    if flat.dtype != torch.float32:
        flat = flat.float()
    out = call("torch_linear_gguf", flat, weight.data, weight.qtype, weight.k)
    return out.reshape(*lead, weight.n)


def gguf_rows(weight: QuantWeight, ids: Tensor) -> Tensor:
    """The rows ``ids`` [T] of ``weight`` decoded to fp32: [T, k] (an embedding lookup
    that keeps the table in its blocks). The C decoder on the CPU, else
    :meth:`QuantWeight.rows`; the same values either way."""
    if ids.dim() == 1 and ids.numel() and not ids.is_floating_point() and ids.is_cpu:
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo < 0 or hi >= weight.n:
            bad = lo if lo < 0 else hi
            raise IndexError(f"token id {bad} is out of range for a table of {weight.n} rows")
        done = native.rows(weight.data, ids, weight.qtype, weight.k)
        if done is not None:
            return done
    return weight.rows(ids)


__all__ = [
    "FORMATS",
    "QuantStack",
    "QuantWeight",
    "gguf_rows",
    "linear_gguf",
    "reference",
    "row_bytes",
]
