"""The form a weight is kept in, and the one interface every user of a weight calls.

A weight [n, k] is kept in exactly one form, chosen when it is loaded or converted and
never re-decided per call:

- :class:`Dense`: the float weight its module holds, multiplied on the CPU through a copy
  packed for the engine's kernel (``native``: the C kernel, ``onednn``; ``torch``: plain
  ``F.linear``, no copy);
- :class:`Int8`: int8 per output channel (``quantization="int8"``), made from a dense
  weight, which still multiplies off the CPU;
- :class:`GgufBlocks`: a GGUF file's blocks as stored (one format);
- :class:`StackedParts`: GGUF blocks whose row ranges are stored in different formats
  (a fused q/k/v of a Q4_K_M file), stacked along n.

Each answers the same questions: its shape, ``matmul`` (x [T, k] -> [T, n]), its name in
the execution plan, a row lookup where it is an embedding table, and its entry in the C
decode stack's table (or the reason it has none). ``Linear``, the logits, the experts and
the embedding hold forms; the decode stack and the plan ask them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tandem.kernels.gguf_blocks import QuantStack, QuantWeight
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native.linear_f32 import PackedF32
from tandem.kernels.native.linear_gguf import supports
from tandem.kernels.ops.gguf_linear import gguf_rows, linear_gguf
from tandem.kernels.ops.linear import PackedWeight, linear
from tandem.kernels.ops.linear_int8 import OUTLIER, Int8Weight, linear_int8

CEntry = native.LinSpec | str  # a weight's entry in the C stack's table, or why it has none
Takes = Callable[[int], bool]  # whether the C kernels take a GGUF format


class WeightForm(ABC):
    """One weight [n, k] in one form (see the module's docstring)."""

    __slots__ = ()

    @property
    @abstractmethod
    def shape(self) -> tuple[int, int]:
        """(n, k): n outputs (rows), k inputs."""

    @property
    @abstractmethod
    def name(self) -> str:
        """The form in the execution plan: ``float32``, ``int8``, ``gguf Q4_K+Q6_K``."""

    @abstractmethod
    def matmul(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        """x [T, k] -> x @ W.T + bias [T, n]: in x's dtype for a float weight, float32
        for the quantized forms (they compute in float32; the caller casts)."""

    def rows(self, ids: Tensor) -> Tensor:
        """The rows ``ids`` [T] as floats [T, k] (an embedding lookup)."""
        raise TypeError(f"a weight kept as {self.name} has no row lookup")

    def c_entry(self, bias: Tensor | None, keep: list[Tensor], takes: Takes = supports) -> CEntry:
        """This weight's (and ``bias``'s) entry in the C decode stack's table, the tensors
        it points into appended to ``keep``; or why the C stack cannot multiply by it.
        ``takes``: the GGUF formats the C kernels take (the stack's to say)."""
        if bias is not None and not (
            bias.dtype == torch.float32 and bias.is_contiguous() and bias.is_cpu
        ):
            return "a bias the C stack cannot read (it takes fp32, contiguous, on the CPU)"
        entry = self._c_weight(bias, takes)
        if isinstance(entry, native.LinSpec):
            keep.extend(entry.weights)
            if entry.int8 is not None:
                keep.extend(entry.int8[:2])
            if bias is not None:
                keep.append(bias)
        return entry

    @abstractmethod
    def _c_weight(self, bias: Tensor | None, takes: Takes) -> CEntry: ...

    def prepare(self) -> None:  # noqa: B027 (most forms have nothing to make)
        """Make now what the first ``matmul`` would (a packed copy)."""

    def use_kernel(self, kernel: str) -> None:  # noqa: B027 (only a float weight has one)
        """Multiply a float weight on ``kernel`` from now on (others keep theirs)."""

    def quantized(self) -> WeightForm | None:
        """This weight in int8, or None where it cannot be (kept quantized, no kernel)."""
        return None

    def moved(self) -> WeightForm:
        """The form once its module's tensors were converted (``.to()``, ``.float()``):
        copies made from the old tensors are dropped."""
        return self

    def plain(self, x: Tensor) -> bool:
        """Whether ``matmul(x)`` is plain ``F.linear`` on the float weight (then a fused
        torch op over stacked experts may run in its place)."""
        return False

    def __str__(self) -> str:
        return self.name


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


class GgufBlocks(WeightForm):
    """A weight kept in the GGUF blocks of one format, as the file stores them (a view of
    its mapping where the rows did not have to move)."""

    __slots__ = ("blocks",)

    def __init__(self, blocks: QuantWeight | QuantStack) -> None:
        self.blocks = blocks

    @property
    def parts(self) -> tuple[QuantWeight, ...]:
        """The blocks of each format, in row order."""
        return (self.blocks,)  # type: ignore[return-value]

    @property
    def shape(self) -> tuple[int, int]:
        return self.blocks.n, self.blocks.k

    @property
    def name(self) -> str:
        return f"gguf {self.blocks.name}"

    def matmul(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        out = linear_gguf(x, self.blocks)  # a new fp32 tensor: the bias goes in place
        return out if bias is None else out.add_(bias)

    def rows(self, ids: Tensor) -> Tensor:
        return gguf_rows(self.blocks, ids)  # type: ignore[arg-type]

    def _c_weight(self, bias: Tensor | None, takes: Takes) -> CEntry:
        parts = self.parts
        if len(parts) > native.MAX_PARTS or not all(type(p) is QuantWeight for p in parts):
            return f"{self.name}: more than {native.MAX_PARTS} formats stacked"
        if not all(p.data.is_cpu and p.data.is_contiguous() for p in parts):
            return f"{self.name}: blocks not contiguous on the CPU"
        if not all(takes(p.qtype) for p in parts):
            return f"{self.name}: a format the C kernels do not take"
        data, qtypes = tuple(p.data for p in parts), tuple(p.qtype for p in parts)
        rows, (n, k) = tuple(p.n for p in parts), self.shape
        return native.LinSpec(native.GGUF, data, qtypes, rows, bias, n, k)


class StackedParts(GgufBlocks):
    """A weight whose row ranges are kept in different GGUF formats
    (:class:`~tandem.kernels.gguf_blocks.QuantStack`): each part multiplies its own
    outputs, in turn."""

    __slots__ = ()

    @property
    def parts(self) -> tuple[QuantWeight, ...]:
        return self.blocks.parts  # type: ignore[union-attr]

    def rows(self, ids: Tensor) -> Tensor:
        raise TypeError(f"a table kept as {self.name} (several formats) has no row lookup")


def gguf_form(blocks: QuantWeight | QuantStack) -> GgufBlocks:
    """The form of a weight kept in GGUF blocks: one format, or parts in several."""
    if isinstance(blocks, QuantStack):
        return StackedParts(blocks)
    if isinstance(blocks, QuantWeight):
        return GgufBlocks(blocks)
    raise TypeError(f"blocks must be a QuantWeight or QuantStack, got {type(blocks).__name__}")


def check_shape(form: WeightForm, shape: tuple[int, int], what: str) -> WeightForm:
    """``form`` if it is [n, k] = ``shape``; else a ValueError naming both."""
    if form.shape != shape:
        n, k = form.shape
        raise ValueError(f"quantized weight is [{n}, {k}], the {what} [{shape[0]}, {shape[1]}]")
    return form
