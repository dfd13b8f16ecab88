"""The float forms: the float weight its module holds (:class:`Dense`, multiplied
through a copy packed for the engine's kernel) and its int8 copy (:class:`Int8`)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tandem.core.layers.weight_form.form import CEntry, Takes, WeightForm
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native.linear_f32 import PackedF32
from tandem.kernels.ops.linear import PackedWeight, linear
from tandem.kernels.ops.linear_int8 import OUTLIER, Int8Weight, linear_int8


class Dense(WeightForm):
    """The float weight its module holds: ``params["weight"]`` (expert ``index`` of a
    stacked one), read at each call, so that loading, ``.to()`` and a new parameter all
    show. The packed copy is remade whenever the weight changes (see
    :class:`~tandem.kernels.ops.linear.PackedWeight`), so it is never stale."""

    __slots__ = ("index", "kernel", "pack", "params")

    def __init__(self, params: dict[str, Any], index: int | None = None) -> None:
        self.params = params  # the module's own parameter dict
        self.index = index
        self.kernel = "native"  # the engine's choice: see use_kernel
        self.pack = PackedWeight()

    @property
    def weight(self) -> Tensor:
        weight = self.params["weight"]
        return weight if self.index is None else weight[self.index]

    @property
    def shape(self) -> tuple[int, int]:
        n, k = self.weight.shape
        return n, k

    @property
    def name(self) -> str:
        return str(self.weight.dtype).removeprefix("torch.")

    def copy(self, weight: Tensor) -> Tensor | PackedF32 | None:
        """``weight``'s packed copy for the kernel (made now if needed); None off the CPU
        or for plain ``F.linear`` (``kernel="torch"``)."""
        if self.kernel == "torch" or weight.device.type != "cpu":
            return None
        return self.pack.get(weight, self.kernel)

    def matmul(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        weight = self.weight
        return linear(x, weight, bias, self.copy(weight))

    def rows(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight)

    def _c_weight(self, bias: Tensor | None, takes: Takes) -> CEntry:
        weight = self.weight
        packed = self.copy(weight)
        if not isinstance(packed, PackedF32) or weight.dtype != torch.float32:
            return f"{self.name} on the {self.kernel} kernel"
        n, k = packed.n, packed.k
        return native.LinSpec(native.F32, (packed.panels,), (0,), (n,), bias, n, k)

    def prepare(self) -> None:
        self.copy(self.weight)

    def use_kernel(self, kernel: str) -> None:
        if kernel != self.kernel:
            self.kernel = kernel
            self.pack.clear()

    def quantized(self) -> Int8 | None:
        weight = Int8Weight.pack(self.weight)
        return None if weight is None else Int8(weight, self)

    def moved(self) -> Dense:
        self.pack.clear()
        return self

    def plain(self, x: Tensor) -> bool:
        return self.kernel == "torch" or x.device.type != "cpu"


class Int8(WeightForm):
    """Int8 per output channel (:class:`~tandem.kernels.ops.linear_int8.Int8Weight`) on
    the CPU; off the CPU the dense weight it was made from multiplies."""

    __slots__ = ("dense", "weight")

    def __init__(self, weight: Int8Weight, dense: Dense) -> None:
        self.weight = weight
        self.dense = dense

    @property
    def shape(self) -> tuple[int, int]:
        return self.weight.shape

    @property
    def name(self) -> str:
        return "int8"

    def matmul(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        if not x.is_cpu:
            return self.dense.matmul(x, bias)
        return linear_int8(x, self.weight, bias=bias)

    def _c_weight(self, bias: Tensor | None, takes: Takes) -> CEntry:
        blocked = self.weight.native
        if blocked is None:  # torch's int8 matmul: not a kernel the C driver calls
            return "int8 without the C int8 kernel (it needs AVX-512 VNNI)"
        n, k = self.weight.shape
        extra = (blocked.wsum, self.weight.scale, blocked.kp, OUTLIER)
        return native.LinSpec(native.I8, (blocked.blocks,), (0,), (n,), bias, n, k, extra)

    def use_kernel(self, kernel: str) -> None:
        self.dense.use_kernel(kernel)

    def quantized(self) -> Int8 | None:
        return self.dense.quantized()

    def moved(self) -> Dense:
        return self.dense.moved()

    def plain(self, x: Tensor) -> bool:
        return not x.is_cpu and self.dense.plain(x)
