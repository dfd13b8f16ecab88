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

from tandem.kernels.native.loader import library

MAX_PARTS = 3
GGUF, F32 = 0, 1  # Lin.kind


class Lin(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int64),
        ("parts", ctypes.c_int64),
        ("qtype", ctypes.c_int64 * MAX_PARTS),
        ("rows", ctypes.c_int64 * MAX_PARTS),
        ("w", ctypes.c_void_p * MAX_PARTS),
        ("bias", ctypes.c_void_p),
        ("n", ctypes.c_int64),
        ("k", ctypes.c_int64),
    ]


class Layer(ctypes.Structure):
    _fields_ = [
        ("in_norm", ctypes.c_void_p),
        ("post_norm", ctypes.c_void_p),
        ("qkv", Lin),
        ("o", Lin),
        ("gate_up", Lin),
        ("down", Lin),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("window", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("scale", ctypes.c_float),
    ]


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
            row.k_cache, row.v_cache = spec["k_cache"].data_ptr(), spec["v_cache"].data_ptr()
            row.window, row.softcap, row.scale = spec["window"], spec["softcap"], spec["scale"]
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
        block_size: int,
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
        s, t = self.shape, x.shape[0]
        need = self.scratch_floats(t, cu_seqlens is not None)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need, dtype=torch.float32)
        res = torch.empty_like(x)
        cu = None if cu_seqlens is None else cu_seqlens.data_ptr()
        rc = lib.tandem_decode_stack_f32(
            ctypes.addressof(self._table), len(self._table), x.data_ptr(), res.data_ptr(), t,
            s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.eps,
            positions.data_ptr(), cos_sin.data_ptr(), slots.data_ptr(), cu, seq_lens.shape[0],
            seq_lens.data_ptr(), tables.data_ptr(), block_size, tables.shape[1], self._max_part,
            self._scratch.data_ptr(),
        )  # fmt: skip
        if rc != 0:
            raise RuntimeError(f"decode stack: a kernel refused layer {-rc - 1}'s call")
        return x, res
