"""``nn.Linear`` whose CPU matmul runs on a packed copy of its weight.

Its ``kernel`` is the engine's choice (:class:`tandem.core.layers.kernel_choice.KernelChoice`,
given through :meth:`Linear.use_kernel` before the weights are packed): ``native`` (the
default: this project's C kernel where the CPU has AVX-512 or AVX2 with FMA and the
weight is fp32, oneDNN elsewhere), ``onednn``, or ``torch`` for plain ``F.linear``. The
packed copy follows the weight (see :class:`tandem.kernels.ops.linear.PackedWeight`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from tandem.core.layers.kernel_choice import LINEAR_KERNELS
from tandem.core.layers.no_init import skipping
from tandem.kernels.gguf_blocks import QuantStack, QuantWeight
from tandem.kernels.native.linear_f32 import PackedF32
from tandem.kernels.ops.gguf_linear import linear_gguf
from tandem.kernels.ops.linear import PackedWeight, linear
from tandem.kernels.ops.linear_int8 import Int8Weight, linear_int8


def check_kernel(kernel: str) -> str:
    if kernel not in LINEAR_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(LINEAR_KERNELS)}, got {kernel!r}")
    return kernel


def cpu_copy(weight: Tensor, pack: PackedWeight, kernel: str) -> Tensor | PackedF32 | None:
    """``weight``'s copy in ``pack`` for ``kernel`` (made now if needed); None off the
    CPU or for plain ``F.linear`` (``kernel="torch"``)."""
    if kernel == "torch" or weight.device.type != "cpu":
        return None
    return pack.get(weight, kernel)


def packed_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, pack: PackedWeight, kernel: str
) -> Tensor:
    # x: [T, K]; weight: [N, K] -> [T, N]
    return linear(x, weight, bias, cpu_copy(weight, pack, kernel))


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
        self.kernel = "native"  # the engine's choice: see use_kernel
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

    def use_kernel(self, kernel: str) -> None:
        """Multiply on ``kernel`` (one of ``LINEAR_KERNELS``) from now on."""
        if check_kernel(kernel) != self.kernel:
            self.kernel = kernel
            self.pack.clear()

    @property
    def form(self) -> str:
        """The form its weight is kept in: ``gguf Q4_K`` (blocks; ``Q4_K+Q6_K`` stacked
        parts), ``int8``, or the float dtype (``float32``)."""
        if self.quant is not None:
            return f"gguf {self.quant.name}"
        if self.int8 is not None:
            return "int8"
        return str(self.weight.dtype).removeprefix("torch.")

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
            cpu_copy(self.weight, self.pack, self.kernel)

    def forward(self, x: Tensor) -> Tensor:
        if self.quant is not None:
            out = linear_gguf(x, self.quant)  # a new fp32 tensor: the bias goes in place
            if self.bias is not None:
                out.add_(self.bias)
            return out if out.dtype == x.dtype else out.to(x.dtype)
        if self.int8 is not None and x.is_cpu:
            out = linear_int8(x, self.int8)
            return out if out.dtype == x.dtype else out.to(x.dtype)
        return packed_linear(x, self.weight, self.bias, self.pack, self.kernel)

    def _apply(self, fn: Any, recurse: bool = True) -> Linear:
        self.pack.clear()  # .to() / .float(): packed again from the new weight
        self.int8 = None
        return super()._apply(fn, recurse)
