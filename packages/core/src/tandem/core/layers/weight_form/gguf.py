"""The GGUF forms: a weight kept in a file's blocks as stored, in one format
(:class:`GgufBlocks`) or in row ranges of several (:class:`StackedParts`)."""

from __future__ import annotations

from torch import Tensor

from tandem.core.layers.weight_form.form import CEntry, Takes, WeightForm
from tandem.kernels.gguf_blocks import QuantStack, QuantWeight
from tandem.kernels.native import decode_stack as native
from tandem.kernels.ops.gguf_linear import gguf_rows, linear_gguf


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

    def standalone(self) -> GgufBlocks:
        return self

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
