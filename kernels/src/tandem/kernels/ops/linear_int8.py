"""Linear layers with int8 weights and int8 activations quantized per token as they come
(``quantization="int8"``, CPU): :class:`Int8Weight` holds a weight, :func:`linear_int8`
multiplies by it. Where the CPU has AVX-512 VNNI the whole layer is one C call
(``native/linear_i8.c``); elsewhere the activations' quantization and the rescale are one C
pass each around an exact integer product (:func:`_int_matmul`)."""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels import checks


def int8_available() -> bool:
    """Whether torch has the int8 x int8 -> int32 matmul here (``torch._int_mm``, CPU)."""
    return hasattr(torch, "_int_mm")


OUTLIER = 6.0  # an activation with |x| > this * rms(its row) is multiplied in float32


class Int8Weight:
    """A weight quantized to int8 per output channel (symmetric, scale = max|row| / 127).

    :func:`linear_int8` quantizes its input per token (each row its own scale and zero
    point: its range onto 256 steps), multiplies the integers into int32 and scales back to
    float32. Activations above ``OUTLIER`` times their token's rms are taken out first and
    multiplied in float32 (by the weight's columns dequantized): a few large values would
    otherwise set their token's scale and round the rest of its values away. The bound is
    relative so that it fits every layer's input: on SmolLM2 the MLP's input stays below 3
    while the down projection's reaches 30. It is per activation, not per input channel
    (LLM.int8() takes a channel out for every token once some token exceeds it): over a
    prefill of thousands of tokens such channels grew to a quarter of the down
    projection's inputs, while each token has a few outliers.
    """

    __slots__ = ("_plain", "bias", "native", "scale", "shape", "wsum")

    def __init__(self, qweight: Tensor, scale: Tensor, bias: Tensor | None) -> None:
        from tandem.kernels.native import linear_i8

        self.wsum = qweight.sum(dim=1, dtype=torch.int32)  # [N]: takes zero points out
        self.scale = scale  # [N] float32
        self.bias = bias  # [N] float32 or None
        self.shape = (qweight.shape[0], qweight.shape[1])
        # the C kernel's blocked copy (AVX-512 VNNI), or None: torch's int8 matmul then
        self.native = linear_i8.pack(qweight, self.wsum)
        # the plain copy only where there are no blocks (the weight is then held once)
        self._plain: Tensor | None = qweight if self.native is None else None

    @property
    def qweight(self) -> Tensor:
        """[N, K] int8: the plain copy, or read back from the C kernel's blocks (a new
        tensor, for the calls the C kernel does not take)."""
        if self._plain is not None:
            return self._plain
        from tandem.kernels.native import linear_i8

        assert self.native is not None
        return linear_i8.unpack(self.native)

    def on_torch(self) -> Int8Weight:
        """The same weight without the C kernel's blocks: it runs on torch's int8 matmul
        (as on a CPU without VNNI)."""
        plain = object.__new__(Int8Weight)
        plain._plain, plain.native = self.qweight, None
        plain.wsum, plain.scale, plain.bias = self.wsum, self.scale, self.bias
        plain.shape = self.shape
        return plain

    @classmethod
    def pack(cls, weight: Tensor, bias: Tensor | None = None) -> Int8Weight | None:
        """weight: [N, K] float on CPU -> its int8 form; None where int8 cannot run."""
        checks.tensor("weight", weight, ndim=2, dtypes=checks.FLOAT_DTYPES)
        if weight.device.type != "cpu" or not int8_available():
            return None
        with torch.no_grad():
            w = weight.detach().float()
            scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)  # [N]
            q = (w / scale[:, None]).round_().clamp_(-127, 127).to(torch.int8).contiguous()
            b = None if bias is None else bias.detach().float().contiguous()
        return cls(q, scale.contiguous(), b)


# int8 x int8 products summed in fp32 are exact while the sum stays below 2^24 (every
# integer up to it is a float32): 1024 products of at most 128 * 127 do
EXACT_K = 1024


def _int_matmul(xq: Tensor, qweight: Tensor) -> Tensor:
    """xq: [M, K] int8, qweight: [N, K] int8 -> [M, N] int32.

    One row takes ``torch._int_mm``. More go through fp32 GEMM in chunks of ``EXACT_K``
    columns, each chunk's sums exact, so the result is the same integers: without VNNI
    torch's int8 matmul runs at ~5 GOP/s here, 25-30x slower than fp32 on a prompt."""
    if xq.shape[0] >= 2 or xq.shape[1] < 2:  # K = 1: torch's int8 mm answers zeros (2.13)
        acc: Tensor | None = None
        for k0 in range(0, xq.shape[1], EXACT_K):
            xs, ws = xq[:, k0 : k0 + EXACT_K], qweight[:, k0 : k0 + EXACT_K]
            part = (xs.float() @ ws.float().t()).to(torch.int32)  # [M, N], exact
            acc = part if acc is None else acc.add_(part)
        if acc is not None:
            return acc
        return torch.zeros(xq.shape[0], qweight.shape[0], dtype=torch.int32)
    return torch._int_mm(xq, qweight.t())


def outliers(x: Tensor, bound: Tensor) -> Tensor:
    """x [M, K], bound [M] -> [M, K] bool: |x| above its row's bound (NaN too, as in C)."""
    return ~(x.abs() <= bound[:, None])


def quantize_rows(x: Tensor, rel: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The torch form of ``native.quantize_rows``: x [M, K] fp32 -> (q [M, K] int8, scale
    [M], zero [M] int32, outlier bound [M]) with x ~= scale * (q - zero) where |x| <= bound
    (the outliers, above it, are 0 in q)."""
    bound = x.square().mean(dim=1).sqrt_().mul_(rel)  # [M]
    kept = x.masked_fill(outliers(x, bound), 0.0)
    lo, hi = kept.amin(dim=1).clamp_max_(0.0), kept.amax(dim=1).clamp_min_(0.0)  # [M]
    scale = (hi - lo).div_(255.0).clamp_min_(1e-12)
    z = (-lo / scale).round_()  # [M]: the byte 0 stands for
    u = (kept / scale[:, None]).round_().add_(z[:, None]).clamp_(0, 255)
    return u.sub_(128).to(torch.int8), scale, z.sub_(128).int(), bound


def linear_int8(
    x: Tensor, weight: Int8Weight, outlier: float = OUTLIER, bias: Tensor | None = None
) -> Tensor:
    """``x @ W.T + b`` for ``W`` held by ``weight`` and ``b`` its bias, or ``bias`` [N]
    where given (the layer's, added where the weight's own would be: before the
    outliers): x [..., K] -> [..., N] fp32.

    Where the CPU has AVX-512 VNNI the whole layer is one C call (``native.linear_i8``:
    quantize, matmul on the weight's blocked copy, rescale, outliers); else the
    quantization and the rescale run as one C pass each around ``torch._int_mm``, or
    as torch ops where the C kernels do not load.
    """
    from tandem.kernels import native

    n, k = weight.shape
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"x must have shape [..., {k}], got {tuple(x.shape)}")
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"bias must have shape [{n}], got {list(bias.shape)}")
    x2 = x.reshape(-1, k).float().contiguous()  # [M, K]
    b = weight.bias if bias is None else bias.detach().float().contiguous()
    if weight.native is not None:
        out = native.linear_i8.linear(x2, weight.native, weight.scale, b, outlier)
        if out is not None:
            return out.view(*x.shape[:-1], n)
    fast = native.quantize_rows(x2, outlier)
    if fast is not None:
        xq, sx, zero, bound, count = fast  # [M, K] int8, [M], [M], [M], int
    else:
        xq, sx, zero, bound = quantize_rows(x2, outlier)
        count = 1
    qweight = weight.qweight  # [N, K] int8 (read back once where only blocks are kept)
    acc = _int_matmul(xq, qweight)  # [M, N] int32
    out = native.rescale(acc, zero, weight.wsum, sx, weight.scale, b)
    if out is None:
        acc.sub_(zero[:, None] * weight.wsum[None, :])
        out = acc.float().mul_(sx[:, None]).mul_(weight.scale)
        if b is not None:
            out.add_(b)
    if count:  # the outliers: x in fp32 times the weight's columns dequantized
        is_outlier = outliers(x2, bound)  # [M, K]
        cols = is_outlier.any(dim=0).nonzero().flatten()  # [C]: the channels holding one
        w_cols = qweight.index_select(1, cols).float().mul_(weight.scale[:, None])
        x_cols = x2.index_select(1, cols).mul_(is_outlier.index_select(1, cols))  # [M, C]
        out.addmm_(x_cols, w_cols.t())  # w_cols: [N, C]
    return out.view(*x.shape[:-1], n)
