"""A step of decodes (or a few tokens a sequence) through a stack of decoder layers in one
C call (``decode_stack.c``).

:class:`StackTable` holds the C table of the layers (weights, norms, caches: pointers
into tensors it keeps alive) and runs a step. It is made by the caller that knows the
model (``tandem.core.models.decode_stack``); nothing here checks that the table matches
a model, and the step's positions, slots and tables must be validated before
:meth:`StackTable.run` (C trusts them).

A table of a tensor-parallel rank's shard is given the group's sum (``all_reduce``): C calls it
back after each attention and MLP block, on the step's ``x`` (Python's collective, with
the interpreter lock taken again for the call).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.kernels.native.attention import attention_args, step_args
from tandem.kernels.native.contract import constant, struct
from tandem.kernels.native.decode_latent import LatentBlock, fill
from tandem.kernels.native.decode_moe import MoeEntry, moe_struct
from tandem.kernels.native.lin_spec import F32 as F32  # the table's entries, re-exported
from tandem.kernels.native.lin_spec import GGUF as GGUF
from tandem.kernels.native.lin_spec import I8 as I8
from tandem.kernels.native.lin_spec import MAX_PARTS as MAX_PARTS
from tandem.kernels.native.lin_spec import LinSpec
from tandem.kernels.native.loader import library

# LayerProgram's fields in C's numbers
PLACEMENTS = {p: constant(f"TANDEM_NORM_{p.upper()}") for p in ("pre", "sandwich", "post")}
QK_NORMS = {q: constant(f"TANDEM_QK_NORM_{q.upper()}") for q in ("none", "head", "proj")}
GATES = {g: constant(f"TANDEM_GATE_{g.upper()}") for g in ("silu", "gelu_tanh")}
NORMS = ("in_norm", "post_attention_norm", "pre_feedforward_norm", "post_feedforward_norm")
Lin, Layer, StackShape = (
    struct("tandem_linear"),
    struct("tandem_layer"),
    struct("tandem_stack_shape"),
)


@dataclass(frozen=True, slots=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float


@dataclass(frozen=True, slots=True)
class LayerProgram:
    """What a layer does besides its weights: where its norms sit (a key of
    :data:`PLACEMENTS`), its q/k norms (of :data:`QK_NORMS`), its MLP's gate (of
    :data:`GATES`), the scale of each block's output before its residual add and the
    dims of each head rope turns (partial rotary; 0: the whole head)."""

    placement: str = "pre"
    qk_norm: str = "none"
    gate: str = "silu"
    residual_scale: float = 1.0
    rotary_dim: int = 0  # the leading dims of each head rope turns (0: all of them)

    def __post_init__(self) -> None:
        for name, allowed in (
            ("placement", PLACEMENTS),
            ("qk_norm", QK_NORMS),
            ("gate", GATES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"LayerProgram.{name} must be one of {', '.join(allowed)}, "
                    f"got {getattr(self, name)!r}"
                )
        if self.rotary_dim < 0 or self.rotary_dim % 2:
            raise ValueError(
                f"LayerProgram.rotary_dim must be an even count >= 0, got {self.rotary_dim!r}"
            )


def available() -> bool:
    lib = library()
    return lib is not None and hasattr(lib, "tandem_decode_stack_f32")


def _lin(spec: LinSpec) -> Lin:
    lin = Lin()
    lin.kind, lin.parts, lin.n, lin.k = spec.kind, len(spec.weights), spec.n, spec.k
    for i, (w, q, r) in enumerate(zip(spec.weights, spec.qtypes, spec.rows)):
        lin.w[i], lin.qtype[i], lin.rows[i] = w.data_ptr(), q, r
    lin.bias = None if spec.bias is None else spec.bias.data_ptr()
    if spec.int8 is not None:
        wsum, scale, lin.kp, lin.rel = spec.int8
        lin.wsum, lin.scale = wsum.data_ptr(), scale.data_ptr()
    return lin


# C's tandem_stack_shape.sum: x [n] summed over the ranks in place; 0, or non-zero
SumFn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)


class StackTable:
    """The C table of a model's layers and the tensors it points into (kept alive here)."""

    def __init__(
        self,
        shape: Shape,
        layers: list[dict],
        keep: list[Tensor],
        all_reduce: Callable[[Tensor], object] | None = None,
    ) -> None:
        """``layers``: per layer, its ``program`` (:class:`LayerProgram`), the norms of
        :data:`NORMS` its placement uses (fp32 [C]; the others absent or None), q_norm and
        k_norm where it has q/k norms, qkv, o, gate_up, down (:class:`LinSpec`), cos_sin
        (its rope table, fp32 [P, R], R the program's rotary dims), k_cache and v_cache,
        window, softcap, scale, and ``local`` (True: its caches are the local pool's, its
        step the ``local`` one); ``latent`` (:class:`LatentBlock`) where its attention is
        latent (its qkv entry then q's projection, its caches one head of rows); a
        layer with a mixture of experts gives ``moe`` (:class:`MoeEntry`) in place of
        gate_up and down.
        ``all_reduce``: where the layers are a tensor-parallel rank's shard, what sums a block's
        output [T, C] over the ranks in place (it may raise: :meth:`run` raises it again)."""
        self.shape = shape
        self._keep: list = [*keep]  # and the MoE layers' structs and expert arrays
        self._table = (Layer * len(layers))()
        self._max_part = 1
        self._latent = 0  # scratch floats a token of a latent block takes
        self._moe_floats = 0
        for row, spec in zip(self._table, layers):
            program: LayerProgram = spec["program"]
            row.placement = PLACEMENTS[program.placement]
            row.qk_norm = QK_NORMS[program.qk_norm]
            row.gate = GATES[program.gate]
            row.residual_scale = program.residual_scale
            for name in (*NORMS, "q_norm", "k_norm"):
                weight = spec.get(name)
                setattr(row, name, None if weight is None else weight.data_ptr())
            row.cos_sin = spec["cos_sin"].data_ptr()
            row.rotary_dim = program.rotary_dim or shape.head_dim
            row.local = int(spec.get("local", False))
            moe: MoeEntry | None = spec.get("moe")
            lins = ("qkv", "o") if moe is not None else ("qkv", "o", "gate_up", "down")
            for name in lins:
                setattr(row, name, _lin(spec[name]))
                self._max_part = max(self._max_part, *spec[name].rows, 1)
            if moe is not None:
                struct_, arrays = moe_struct(moe, _lin)
                self._keep += [struct_, *arrays]
                row.moe = ctypes.pointer(struct_)
                self._max_part = max(self._max_part, *(r for s in moe.linears() for r in s.rows))
                self._moe_floats = max(self._moe_floats, moe.floats(shape.hidden))
            row.attention = attention_args(
                spec["k_cache"], spec["v_cache"], shape.heads, spec["scale"], spec["window"],
                spec["softcap"],
            )  # fmt: skip
            latent: LatentBlock | None = spec.get("latent")
            if latent is not None:  # its q_a and kv_a, its sizes and kv_b
                fill(row.latent, latent, _lin)
                self._latent = max(self._latent, latent.floats())
                for lin in latent.linears():
                    self._max_part = max(self._max_part, *lin.rows, 1)
        self._shape = StackShape(
            hidden=shape.hidden,
            intermediate=shape.intermediate,
            max_part=self._max_part,
            eps=shape.eps,
            moe_floats=self._moe_floats,
        )
        self._scratch = torch.empty(0)
        self._all_reduce, self._x = all_reduce, None  # the sum, and the step's x in C
        self._failed: BaseException | None = None  # what the sum raised
        self._sum_c = None if all_reduce is None else SumFn(self._summed)  # kept alive here
        if self._sum_c is not None:
            self._shape.sum = ctypes.cast(self._sum_c, ctypes.c_void_p)

    def _summed(self, ptr: int | None, n: int) -> int:
        """C's callback: the step's x summed over the ranks; -1 (the error kept for
        :meth:`run`) where it is not the step's x or the sum raised."""
        x = self._x
        try:
            if x is None or ptr != x.data_ptr() or n != x.numel():
                raise RuntimeError("decode stack: a sum was asked of another buffer than x")
            self._all_reduce(x)  # type: ignore[misc]
        except BaseException as exc:  # C cannot carry it: run raises it again
            self._failed = exc
            return -1
        return 0

    def scratch_floats(self, tokens: int) -> int:
        """Floats of scratch a step of ``tokens`` needs."""
        s = self.shape
        q = (s.heads + 2 * s.kv_heads) * s.head_dim
        per_row = s.hidden + q + s.heads * s.head_dim + 3 * s.intermediate + self._max_part
        per_row += 2 * (s.heads + s.kv_heads) * s.head_dim  # q and k normed, then rotated
        per_row += self._moe_floats  # a MoE layer's, then 2 to align its int64 ids
        per_row += self._latent
        return tokens * per_row + 2

    def run(
        self,
        x: Tensor,
        positions: Tensor,
        cos_sin: Tensor,
        slots: Tensor,
        seq_lens: Tensor,
        tables: Tensor,
        cu_seqlens: Tensor | None = None,
        local: tuple[Tensor, Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor] | None:
        """x: [T, C] fp32 contiguous (the embeddings; overwritten) -> (x, residual) after
        the last layer; None where the library is missing. positions, slots int64 [T];
        seq_lens int32 [B]; tables int32 [B, M]; ``cu_seqlens`` int32 [B + 1], the
        sequences' token offsets of a step laid out as a prefill (None: a step of decodes,
        B == T); ``local``: (slots, seq_lens, tables) of the local layers' pool, where
        they have one; all contiguous. A kernel refusing its call half-way (the table promised it
        would not) or a failed sum raises: the caches are half written."""
        lib = library()
        if lib is None:
            return None
        t = x.shape[0]
        need = self.scratch_floats(t)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(need, dtype=torch.float32)
        res = torch.empty_like(x)
        step = step_args(seq_lens, tables, t, cu_seqlens, positions, cos_sin, slots)
        pool = None
        if local is not None:
            l_slots, l_lens, l_tables = local
            pool = step_args(l_lens, l_tables, t, cu_seqlens, positions, cos_sin, l_slots)
        self._x, self._failed = x, None
        try:
            rc = lib.tandem_decode_stack_f32(
                self._table, len(self._table), ctypes.byref(self._shape), ctypes.byref(step),
                None if pool is None else ctypes.byref(pool), x.data_ptr(), res.data_ptr(),
                self._scratch.data_ptr(),
            )  # fmt: skip
        finally:
            self._x = None
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        if rc != 0:
            raise RuntimeError(f"decode stack: a kernel refused layer {-rc - 1}'s call")
        return x, res
