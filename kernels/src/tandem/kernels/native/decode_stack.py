"""A step of decodes (or a few tokens a sequence) through a stack of decoder layers in one
C call (``decode_stack.c``).

:class:`StackTable` holds the C table of the layers (weights, norms, caches: pointers
into tensors it keeps alive) and runs a step. It is made by the caller that knows the
model (``tandem.core.models.decode_stack``); nothing here checks that the table matches
a model, and the step's positions, slots and tables must be validated before
:meth:`StackTable.run` (C trusts them).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.kernels.native.attention import attention_args, step_args
from tandem.kernels.native.contract import constant, struct
from tandem.kernels.native.loader import library

MAX_PARTS = constant("TANDEM_MAX_PARTS")
GGUF, F32 = constant("TANDEM_LINEAR_GGUF"), constant("TANDEM_LINEAR_F32")  # LinSpec.kind
Lin, Layer, StackShape = (
    struct("tandem_linear"),
    struct("tandem_layer"),
    struct("tandem_stack_shape"),
)


@dataclass(frozen=True, slots=True)
class LinSpec:
    """One linear layer's weight for the table: GGUF parts (uint8 blocks, format, rows)
    or one fp32 packed panel tensor; ``bias`` fp32 [n] or None."""

    kind: int
    weights: tuple[Tensor, ...]
    qtypes: tuple[int, ...]
    rows: tuple[int, ...]
    bias: Tensor | None
    n: int
    k: int


@dataclass(frozen=True, slots=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float


def available() -> bool:
    lib = library()
    return lib is not None and hasattr(lib, "tandem_decode_stack_f32")


def _lin(spec: LinSpec) -> Lin:
    lin = Lin()
    lin.kind, lin.parts, lin.n, lin.k = spec.kind, len(spec.weights), spec.n, spec.k
    for i, (w, q, r) in enumerate(zip(spec.weights, spec.qtypes, spec.rows)):
        lin.w[i], lin.qtype[i], lin.rows[i] = w.data_ptr(), q, r
    lin.bias = None if spec.bias is None else spec.bias.data_ptr()
    return lin


class StackTable:
    """The C table of a model's layers and the tensors it points into (kept alive here)."""

    def __init__(self, shape: Shape, layers: list[dict], keep: list[Tensor]) -> None:
        """``layers``: per layer, in_norm and post_norm (fp32 [C]), qkv, o, gate_up, down
        (:class:`LinSpec`), k_cache and v_cache, window, softcap, scale."""
        self.shape = shape
        self._keep = keep
        self._table = (Layer * len(layers))()
        self._max_part = 1
        for row, spec in zip(self._table, layers):
            row.in_norm, row.post_norm = spec["in_norm"].data_ptr(), spec["post_norm"].data_ptr()
            for name in ("qkv", "o", "gate_up", "down"):
                setattr(row, name, _lin(spec[name]))
                self._max_part = max(self._max_part, *spec[name].rows, 1)
            row.attention = attention_args(
                spec["k_cache"], spec["v_cache"], shape.heads, spec["scale"], spec["window"],
                spec["softcap"],
            )  # fmt: skip
        self._shape = StackShape(shape.hidden, shape.intermediate, self._max_part, shape.eps)
        self._scratch = torch.empty(0)

    def scratch_floats(self, tokens: int, offsets: bool = False) -> int:
        """Floats of scratch a step of ``tokens`` needs (``offsets``: a step given its
        sequences' token offsets, which rotates q and k into scratch of their own)."""
        s = self.shape
        q = (s.heads + 2 * s.kv_heads) * s.head_dim
        per_row = s.hidden + q + s.heads * s.head_dim + 3 * s.intermediate + self._max_part
        if offsets:
            per_row += (s.heads + s.kv_heads) * s.head_dim
        return tokens * per_row

    def run(
        self,
        x: Tensor,
        positions: Tensor,
        cos_sin: Tensor,
        slots: Tensor,
        seq_lens: Tensor,
        tables: Tensor,
        cu_seqlens: Tensor | None = None,
    ) -> tuple[Tensor, Tensor] | None:
        """x: [T, C] fp32 contiguous (the embeddings; overwritten) -> (x, residual) after
        the last layer; None where the library is missing. positions, slots int64 [T];
        seq_lens int32 [B]; tables int32 [B, M]; ``cu_seqlens`` int32 [B + 1], the
        sequences' token offsets of a step laid out as a prefill (None: a step of decodes,
        B == T); all contiguous. A kernel refusing its call half-way (the table promised it
        would not) raises: the caches are half written."""
        lib = library()
        if lib is None:
            return None
        t = x.shape[0]
        need = self.scratch_floats(t, cu_seqlens is not None)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need, dtype=torch.float32)
        res = torch.empty_like(x)
        step = step_args(seq_lens, tables, t, cu_seqlens, positions, cos_sin, slots)
        rc = lib.tandem_decode_stack_f32(
            self._table, len(self._table), ctypes.byref(self._shape), ctypes.byref(step),
            x.data_ptr(), res.data_ptr(), self._scratch.data_ptr(),
        )  # fmt: skip
        if rc != 0:
            raise RuntimeError(f"decode stack: a kernel refused layer {-rc - 1}'s call")
        return x, res
