"""A step of decodes (or of a few tokens laid out as a prefill: a speculative verify)
through the whole decoder stack in one C call, where the model allows.

On a small model a decode token is mostly the calls between kernels, not the kernels:
SmolLM2's 30 layers make ~240 of them, each several microseconds of Python around work
of the same size. :class:`DecodeStack` gives the C driver (``native/decode_stack.c``) a
table of the layers once and then runs a decode-only step in one call, through the same
kernels in the same order as the modules (the same numbers, bit for bit).

Each layer's program comes from the :class:`~tandem.core.spec.model.ModelSpec`: where its
norms sit (pre, sandwich, post), q/k norms (over each head or the whole projection), the
MLP's gate (SiLU or tanh-GELU), the residual scale, its rope table, its attention's scale,
window and soft-cap, and which pool of KV blocks it reads (Gemma's sliding layers may keep
their own); scaled embeddings are scaled before the call. It takes stacks of plain
attention (plain or latent) and dense gated MLPs or mixtures of experts (softmax routing,
or DeepSeek-V3's group-limited sigmoid: :mod:`~tandem.core.models.stack_moe`), rope over the
whole head or its leading dims, whole or a tensor-parallel rank's shard (the table's sum
after o and down, or after the experts, does what the row-parallel projections and the
experts' sum do; a rank runs the experts it holds, and a latent layer its heads), every
linear layer and expert a GGUF weight kept as stored in a format the C kernels take
(blocks, K-quants, F16 / BF16; up to three formats stacked), an fp32 weight packed for the
C kernel or an int8 weight blocked for the C int8 kernel (AVX-512 VNNI). A
step of prefills only, of at most ``FEW_TOKENS`` tokens, goes through too (its attention
is the module path's for a prefill: rope, K/V write, paged prefill attention): a
speculative verify is k + 1 tokens a sequence, and a draft model catching up after a
verify feeds two or more. Anything else (long prompts, steps mixing prefills and decodes)
runs the modules.
"""

from __future__ import annotations

from operator import is_, itemgetter

import torch
from torch import Tensor

from tandem.core.layers.attention_metadata import AttentionMetadata
from tandem.core.layers.mlp import MLP_ROWS
from tandem.core.layers.self_attention import KVCache
from tandem.core.layers.weight_form import Dense
from tandem.core.models import stack_moe
from tandem.core.models.stack_latent import attention_linears, checked_layer
from tandem.core.models.stack_program import describe, parallel_note, why_not
from tandem.core.models.stack_table import build_table, lin_entry
from tandem.core.parallel.group import TensorParallel
from tandem.core.spec.model import ModelSpec
from tandem.kernels.decode_inputs import DecodeStep
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native.linear_gguf import supports
from tandem.kernels.ops.decode_step import check_rope_decode
from tandem.kernels.ops.latent import C_TOKENS

FEW_TOKENS = 256  # the longest step of prefills the C stack takes (its scratch grows with it)
_WEIGHT = itemgetter("weight")


class DecodeStack:
    """The decoder stack's decode steps (and short prefill-only steps) through one C call;
    :meth:`run` answers None where it does not apply, and the caller runs the modules."""

    __slots__ = (
        "_caches", "_f32", "_latent", "_model", "_norm_params", "_norm_weights", "_rope", "_spec",
        "_table", "_tp", "reason", "usable",
    )  # fmt: skip

    def __init__(
        self, model: torch.nn.Module, spec: ModelSpec, tp: TensorParallel | None = None
    ) -> None:
        """``tp``: the tensor-parallel group the model's layers are this rank's shard of."""
        self._model = model  # a DecoderModel
        self._spec = spec
        self._tp = tp
        self._table: native.StackTable | None = None
        self._caches: list[KVCache] | None = None  # the list the table was made for
        # fp32 weights, the experts' too: their packed copy must still hold
        self._f32: list[Dense] = []
        # each norm's parameters (its own dict: no module attribute lookup a step) and the
        # weight the table points into, side by side (one C-level pass a step compares them)
        self._norm_params: list[dict[str, object]] = []
        self._norm_weights: list[Tensor] = []
        self._rope: Tensor | None = None
        self._latent = spec.attention.latent is not None  # DeepSeek's MLA on every layer
        # why the C driver cannot run this stack (None: it can, if the weights allow)
        reason = why_not(spec)
        self.reason = "the C kernels did not build" if not native.available() else reason
        self.usable = self.reason is None

    def weights_reason(self) -> str | None:
        """Why the C driver cannot take the stack's weights as they now are (their form
        or kernel), or None where it can."""
        if self.reason is not None:
            return self.reason
        for i, layer in enumerate(self._model.layers):
            mlp = layer.mlp
            lins = attention_linears(layer.self_attn, self._latent)
            if self._spec.layer_mlp(i).moe is not None:
                why = stack_moe.weights_reason(mlp, supports)
                if why is not None:
                    return f"layer {i} experts: {why}"
            else:
                lins |= {"gate_up": mlp.gate_up_proj, "down": mlp.down_proj}
            for name, lin in lins.items():
                if lin_entry(lin, []) is None:
                    return f"layer {i} {name}: {lin.form} on the {lin.kernel} kernel"
        return None

    def describe(self) -> str:
        """What the C driver's layer programs do beyond the Llama layer (the plan's note)."""
        return ", ".join(filter(None, (describe(self._spec), parallel_note(self._tp))))

    def drop(self) -> None:
        """Forget the table (the weights changed: loaded, quantized, moved)."""
        self._table = None

    def run(
        self, x: Tensor, positions: Tensor, kv_caches: list[KVCache], meta: AttentionMetadata
    ) -> tuple[Tensor, Tensor] | None:
        """x: [T, C] the step's embeddings -> (x, residual) after the last layer. A step of
        decodes, or of prefills only of at most ``FEW_TOKENS`` tokens (a speculative
        verify, a draft model catching up); None for anything else."""
        t = x.shape[0]
        decodes = meta.num_prefill_tokens == 0
        few = meta.num_decodes == 0 and t <= FEW_TOKENS
        if not self.usable or not (decodes or few) or not 0 < t <= 2 * MLP_ROWS:
            return None
        if self._latent and t > C_TOKENS:  # the modules' latent steps run torch there
            return None
        if x.dtype != torch.float32 or not x.is_cpu or not x.is_contiguous() or x.dim() != 2:
            return None
        table = self._table_for(kv_caches)
        if table is None:
            return None
        cu = None if decodes else meta.prefill_cu_seqlens_q.to(torch.int32).contiguous()
        pos = positions.to(torch.int64).contiguous()
        step = self._checked(meta, pos, cu, kv_caches, local=False)
        pool = None
        if meta.local is not None:  # the sliding-window layers keep a pool of their own
            if not any(layer.self_attn.local for layer in self._model.layers):
                return None
            pool = self._checked(meta.local, pos, cu, kv_caches, local=True)
        return table.run(
            x, pos, step.cos_sin, step.slot_mapping, step.seq_lens, step.block_tables, cu,
            None if pool is None else (pool.slot_mapping, pool.seq_lens, pool.block_tables),
        )  # fmt: skip

    def _checked(
        self,
        meta: AttentionMetadata,
        positions: Tensor,
        cu: Tensor | None,
        kv_caches: list[KVCache],
        local: bool,
    ) -> DecodeStep:
        """The step of ``meta`` (one pool's slots and tables), validated against the caches
        of the first layer reading it (the global pool's: with ``local`` False, the first
        layer that is not local, else the first local one; where there is one pool, the
        first layer)."""
        decodes = cu is None
        lens = meta.decode_seq_lens if decodes else meta.prefill_seq_lens
        tables = meta.decode_block_tables if decodes else meta.prefill_block_tables
        step = DecodeStep(
            positions,
            self._rope,
            meta.slot_mapping.to(torch.int64).contiguous(),
            lens.to(torch.int32).contiguous(),
            tables.to(torch.int32).contiguous(),
        )
        layers = self._model.layers
        i = next((i for i, ly in enumerate(layers) if ly.self_attn.local == local), 0)
        layer, width = checked_layer(layers[i].self_attn, self._latent)
        qkv = torch.empty(positions.shape[0], width)  # its shape is checked
        check_rope_decode(qkv, layer, step, *kv_caches[i], cu)
        return step

    def _table_for(self, kv_caches: list[KVCache]) -> native.StackTable | None:
        """The table, made again when the caches, a norm's weight or an fp32 layer's
        packed copy changed since (GGUF blocks never change)."""
        fresh = (
            self._table is not None
            and kv_caches is self._caches
            and all(form.pack.holds(form.weight, form.kernel) for form in self._f32)
            and all(map(is_, map(_WEIGHT, self._norm_params), self._norm_weights))
        )
        if not fresh:
            built = build_table(self._model, self._spec, self._tp, kv_caches)
            self._caches = kv_caches
            if built is None:
                self._table, self.usable = None, False
            else:
                self._table, self._f32 = built.table, built.f32
                self._norm_params = [params for params, _ in built.norms]
                self._norm_weights = [w for _, w in built.norms]
                self._rope = built.rope
        return self._table
