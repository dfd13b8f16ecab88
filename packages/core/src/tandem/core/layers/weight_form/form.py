"""The interface of a weight's form: what every form answers (see the package's
docstring), and the shape check its users apply to a form they are handed."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
from torch import Tensor

from tandem.kernels.native import decode_stack as native
from tandem.kernels.native.linear_gguf import supports

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

    def standalone(self) -> WeightForm | None:
        """This weight in a form that holds all of it without its module's float
        tensor (which may then be freed); None where it still reads that tensor."""
        return None

    def plain(self, x: Tensor) -> bool:
        """Whether ``matmul(x)`` is plain ``F.linear`` on the float weight (then a fused
        torch op over stacked experts may run in its place)."""
        return False

    def __str__(self) -> str:
        return self.name


def check_shape(form: WeightForm, shape: tuple[int, int], what: str) -> WeightForm:
    """``form`` if it is [n, k] = ``shape``; else a ValueError naming both."""
    if form.shape != shape:
        n, k = form.shape
        raise ValueError(f"quantized weight is [{n}, {k}], the {what} [{shape[0]}, {shape[1]}]")
    return form
