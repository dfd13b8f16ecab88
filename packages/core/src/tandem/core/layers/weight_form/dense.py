"""The float forms: the float weight its module holds (:class:`Dense`, multiplied
through a copy packed for the engine's kernel), its int8 copy (:class:`Int8`), and its
fp32 copy in the C kernel's panels kept alone (:class:`Panels`).

On the CPU a loaded model would hold every weight twice, the float tensor the checkpoint
was read into and the copy its kernel reads. An engine reads the copy alone (the matmuls
and the C decode stack multiply by it; a tied table's rows are read from the panels), so
once its kernels are final it takes each weight's :meth:`~WeightForm.standalone` form and
frees the float tensor: the model is resident once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tandem.core.layers.weight_form.form import CEntry, Takes, WeightForm
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native import linear_f32
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
        return Panels(packed)._c_weight(bias, takes)  # the same entry: the panels

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

    def standalone(self) -> Panels | None:
        weight = self.weight
        if weight.dtype != torch.float32 or weight.shape[1] == 0:
            return None
        if not (self.kernel == "native" and self.pack.holds(weight, self.kernel)):
            return None  # not packed (yet), or not for the C kernel
        packed = self.copy(weight)
        return Panels(packed) if isinstance(packed, PackedF32) else None


class Int8(WeightForm):
    """Int8 per output channel (:class:`~tandem.kernels.ops.linear_int8.Int8Weight`) on
    the CPU; off the CPU the dense weight it was made from multiplies (``dense``, None
    once it was freed)."""

    __slots__ = ("dense", "weight")

    def __init__(self, weight: Int8Weight, dense: Dense | None) -> None:
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
            if self.dense is None:
                raise ValueError(f"an int8 weight runs on the CPU alone, got x on {x.device}")
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
        if self.dense is not None:
            self.dense.use_kernel(kernel)

    def quantized(self) -> Int8 | None:
        return self if self.dense is None else self.dense.quantized()

    def moved(self) -> WeightForm:
        return self if self.dense is None else self.dense.moved()

    def plain(self, x: Tensor) -> bool:
        return not x.is_cpu and self.dense is not None and self.dense.plain(x)

    def standalone(self) -> Int8:
        return self if self.dense is None else Int8(self.weight, None)


class Panels(WeightForm):
    """An fp32 weight [n, k] in the C kernel's panels, with no float copy beside them
    (see the module's docstring)."""

    __slots__ = ("packed",)

    def __init__(self, packed: PackedF32) -> None:
        self.packed = packed

    @property
    def shape(self) -> tuple[int, int]:
        return self.packed.n, self.packed.k

    @property
    def name(self) -> str:
        return "float32"

    def weight(self) -> Tensor:
        """The float weight [n, k] read back from the panels (a new tensor): for a call
        the C kernel does not take, and for quantizing."""
        return linear_f32.unpack(self.packed)

    def matmul(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        # x: [..., k] -> [..., n]
        n, k = self.shape
        flat = x.reshape(-1, k)  # [T, k]
        out = linear_f32.linear(flat, self.packed, bias)
        if out is None:  # not fp32 on the CPU: the weight read back, in x's dtype and place
            weight = self.weight().to(device=x.device, dtype=x.dtype)
            out = F.linear(flat, weight, None if bias is None else bias.to(weight))
        return out.view(*x.shape[:-1], n)

    def rows(self, ids: Tensor) -> Tensor:
        return linear_f32.rows(self.packed, ids)

    def _c_weight(self, bias: Tensor | None, takes: Takes) -> CEntry:
        n, k = self.shape
        return native.LinSpec(native.F32, (self.packed.panels,), (0,), (n,), bias, n, k)

    def use_kernel(self, kernel: str) -> None:
        if kernel != "native":
            raise ValueError(
                f"kernel {kernel!r}: this weight is kept in the native kernel's panels alone "
                "(its float copy was freed at load); load the model with that kernel instead"
            )

    def quantized(self) -> Int8 | None:
        weight = Int8Weight.pack(self.weight())
        return None if weight is None else Int8(weight, None)

    def standalone(self) -> Panels:
        return self
