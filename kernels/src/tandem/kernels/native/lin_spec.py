"""One linear layer's entry in the decode stack's C table (``tandem_linear``): the
weight's kind, its tensors and sizes, as the weight forms give it and the stack's table
(and its expert and latent blocks) read it."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from tandem.kernels.native.contract import constant

MAX_PARTS = constant("TANDEM_MAX_PARTS")
GGUF, F32, I8 = (constant(f"TANDEM_LINEAR_{k}") for k in ("GGUF", "F32", "I8"))  # LinSpec.kind


@dataclass(frozen=True, slots=True)
class LinSpec:
    """One linear layer's weight for the table: GGUF parts (uint8 blocks, format, rows),
    one fp32 packed panel tensor or one int8 blocked weight; ``bias`` fp32 [n] or None;
    ``int8``: the int8 weight's (channel sums int32 [n], scales fp32 [n], padded k,
    outlier bound)."""

    kind: int
    weights: tuple[Tensor, ...]
    qtypes: tuple[int, ...]
    rows: tuple[int, ...]
    bias: Tensor | None
    n: int
    k: int
    int8: tuple[Tensor, Tensor, int, float] | None = None
