"""``nn.Linear`` whose CPU matmul runs on a packed copy of its weight.

The choice is ``TANDEM_CPU_LINEAR``: ``native`` (the default: this project's C kernel
where the CPU has AVX-512 or AVX2 with FMA and the weight is fp32, oneDNN elsewhere), ``onednn``, or
``torch`` for plain ``F.linear``; read through an ``env_cache`` so that flipping it is
always seen. The packed copy follows the weight (see
:class:`tandem.kernels.ops.linear.PackedWeight`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from tandem.core import envs
from tandem.core.env_cache import env_cache
from tandem.core.layers.no_init import skipping
from tandem.kernels.gguf_blocks import QuantStack, QuantWeight
from tandem.kernels.native.linear_f32 import PackedF32
from tandem.kernels.ops.gguf_linear import linear_gguf
from tandem.kernels.ops.linear import PackedWeight, linear
from tandem.kernels.ops.linear_int8 import Int8Weight, linear_int8


@env_cache("TANDEM_CPU_LINEAR")
def packed_kernel() -> str | None:
    """The kernel the CPU linear layers pack their weights for ("native" or "onednn"),
    or None for plain ``F.linear`` (``TANDEM_CPU_LINEAR=torch``)."""
    kernel = envs.TANDEM_CPU_LINEAR
    return None if kernel == "torch" else kernel


def cpu_copy(weight: Tensor, pack: PackedWeight) -> Tensor | PackedF32 | None:
    """``weight``'s copy in ``pack`` for the kernel ``TANDEM_CPU_LINEAR`` names (made
    now if needed); None off the CPU or for plain ``F.linear``."""
    kernel = packed_kernel() if weight.device.type == "cpu" else None
    return pack.get(weight, kernel) if kernel else None


def packed_linear(x: Tensor, weight: Tensor, bias: Tensor | None, pack: PackedWeight) -> Tensor:
    # x: [T, K]; weight: [N, K] -> [T, N]
    return linear(x, weight, bias, cpu_copy(weight, pack))


class Linear(nn.Linear):
    """``nn.Linear`` with the packed copy of its weight beside it (made on first use).

    After :meth:`quantize` it multiplies in int8 (``quantization="int8"``); after
    :meth:`use_quantized` on a GGUF weight kept in its blocks (then it has no float
    ``weight``: ``quantization="gguf"``).
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, dtype: Any = None
    ) -> None:
        super().__init__(in_features, out_features, bias=bias, dtype=dtype)
        self.pack = PackedWeight()
        self.int8: Int8Weight | None = None
        self.quant: QuantWeight | QuantStack | None = None

    def use_quantized(self, weight: QuantWeight | QuantStack) -> None:
        """Multiply by ``weight`` (GGUF blocks, [out, in]) from now on; the float weight
        must already be gone (the loader never makes it)."""
        if (weight.n, weight.k) != (self.out_features, self.in_features):
            raise ValueError(
                f"quantized weight is [{weight.n}, {weight.k}], the layer "
                f"[{self.out_features}, {self.in_features}]"
            )
        self.quant = weight

    def reset_parameters(self) -> None:
        if not skipping():  # inside no_init: the loader fills the weight
            super().reset_parameters()

    def quantize(self) -> bool:
        """Use int8 weights from now on (CPU); False where no int8 kernel exists."""
        if self.quant is not None:
            return False
        self.int8 = Int8Weight.pack(self.weight, self.bias)
        return self.int8 is not None

    def prepare(self) -> None:
        """Make the packed copy now (at load) rather than in the first forward pass."""
        if self.int8 is None and self.quant is None:
            cpu_copy(self.weight, self.pack)

    def forward(self, x: Tensor) -> Tensor:
        if self.quant is not None:
            out = linear_gguf(x, self.quant)  # a new fp32 tensor: the bias goes in place
            if self.bias is not None:
                out.add_(self.bias)
            return out if out.dtype == x.dtype else out.to(x.dtype)
        if self.int8 is not None and x.is_cpu:
            out = linear_int8(x, self.int8)
            return out if out.dtype == x.dtype else out.to(x.dtype)
        return packed_linear(x, self.weight, self.bias, self.pack)

    def _apply(self, fn: Any, recurse: bool = True) -> Linear:
        self.pack.clear()  # .to() / .float(): packed again from the new weight
        self.int8 = None
        return super()._apply(fn, recurse)
