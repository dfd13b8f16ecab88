"""A step of decodes (or of a few tokens laid out as a prefill: a speculative verify)
through the whole decoder stack in one C call, where the model allows.

On a small model a decode token is mostly the calls between kernels, not the kernels:
SmolLM2's 30 layers make ~240 of them, each several microseconds of Python around work
of the same size. :class:`DecodeStack` gives the C driver (``native/decode_stack.c``) a
table of the layers once and then runs a decode-only step in one call, through the same
kernels in the same order as the modules (the same numbers, bit for bit).

It takes Llama-family stacks only: pre-norm layers with SiLU gated MLPs, attention with
one rope table and no q/k norms, no tensor parallelism, every linear layer a GGUF weight
kept as stored in a format the C kernels take (blocks, K-quants, F16 / BF16; up to three
formats stacked) or an fp32 weight packed for the C kernel. A step of prefills only, of at
most ``FEW_TOKENS`` tokens, goes through too (its attention is the module path's for a
prefill: rope, K/V write, paged prefill attention): a speculative verify is k + 1 tokens
a sequence, and a draft model catching up after a verify feeds two or more. Anything else
(long prompts, steps mixing prefills and decodes) runs the modules.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.core.layers.attention_metadata import AttentionMetadata
from tandem.core.layers.linear import Linear
from tandem.core.layers.mlp import MLP_ROWS, GatedMLP
from tandem.core.layers.self_attention import KVCache, SelfAttention
from tandem.kernels import ops
from tandem.kernels.decode_inputs import DecodeStep
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native.linear_gguf import supports
from tandem.kernels.ops.decode_step import check_rope_decode

FEW_TOKENS = 256  # the longest step of prefills the C stack takes (its scratch grows with it)


def _lin(layer: Linear, keep: list[Tensor]) -> native.LinSpec | None:
    """The table entry of one linear layer (its weight form's), or None where the C
    driver cannot run it."""
    if type(layer) is not Linear:
        return None
    entry = layer.form.c_entry(layer.bias, keep, supports)
    return None if isinstance(entry, str) else entry


class DecodeStack:
    """The decoder stack's decode steps (and short prefill-only steps) through one C call;
    :meth:`run` answers None where it does not apply, and the caller runs the modules."""

    __slots__ = ("_caches", "_f32", "_model", "_norms", "_rope", "_table", "reason", "usable")

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = model  # a DecoderModel
        self._table: native.StackTable | None = None
        self._caches: list[KVCache] | None = None  # the list the table was made for
        self._f32: list[Linear] = []  # fp32 layers: their packed copy must still hold
        # each norm's parameters (its own dict: no module attribute lookup a step) and weight
        self._norms: list[tuple[dict[str, object], Tensor]] = []
        self._rope: Tensor | None = None
        # why the C driver cannot run this stack (None: it can, if the weights allow)
        self.reason = "the C kernels did not build" if not native.available() else why_not(model)
        self.usable = self.reason is None

    def weights_reason(self) -> str | None:
        """Why the C driver cannot take the stack's weights as they now are (their form
        or kernel), or None where it can."""
        if self.reason is not None:
            return self.reason
        for i, layer in enumerate(self._model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            for name, lin in (
                ("qkv_proj", attn.qkv_proj),
                ("o_proj", attn.o_proj),
                ("gate_up_proj", mlp.gate_up_proj),
                ("down_proj", mlp.down_proj),
            ):
                if _lin(lin, []) is None:
                    return f"layer {i} {name}: {lin.form} on the {lin.kernel} kernel"
        return None

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
        if meta.local is not None:  # one block table for every layer only
            return None
        if x.dtype != torch.float32 or not x.is_cpu or not x.is_contiguous() or x.dim() != 2:
            return None
        table = self._table_for(kv_caches)
        if table is None:
            return None
        lens = meta.decode_seq_lens if decodes else meta.prefill_seq_lens
        tables = meta.decode_block_tables if decodes else meta.prefill_block_tables
        step = DecodeStep(
            positions.to(torch.int64).contiguous(),
            self._rope,
            meta.slot_mapping.to(torch.int64).contiguous(),
            lens.to(torch.int32).contiguous(),
            tables.to(torch.int32).contiguous(),
        )
        first = self._model.layers[0].self_attn
        k_cache, v_cache = kv_caches[0]
        qkv = x.new_empty(t, first.qkv_proj.out_features)  # its shape is what is checked
        cu = None if decodes else meta.prefill_cu_seqlens_q.to(torch.int32).contiguous()
        check_rope_decode(qkv, first.attn.layer, step, k_cache, v_cache, cu)
        s = step
        return table.run(
            x, s.positions, s.cos_sin, s.slot_mapping, s.seq_lens, s.block_tables, cu
        )  # fmt: skip

    def _table_for(self, kv_caches: list[KVCache]) -> native.StackTable | None:
        """The table, made again when the caches, a norm's weight or an fp32 layer's
        packed copy changed since (GGUF blocks never change)."""
        fresh = (
            self._table is not None
            and kv_caches is self._caches
            and all(lin.pack.holds(lin.weight, lin.kernel) for lin in self._f32)
            and all(params["weight"] is w for params, w in self._norms)
        )
        if not fresh:
            self._f32, self._norms = [], []
            self._table = self._build(kv_caches)
            self._caches = kv_caches
            if self._table is None:
                self.usable = False
        return self._table

    def _build(self, kv_caches: list[KVCache]) -> native.StackTable | None:
        model = self._model
        first = model.layers[0]
        keep: list[Tensor] = []
        rows = []
        for layer, (kc, vc) in zip(model.layers, kv_caches):
            if not all(
                c.dtype == torch.float32 and c.is_cpu and c.is_contiguous() for c in (kc, vc)
            ):
                return None
            if kc.shape != kv_caches[0][0].shape or vc.shape != kc.shape:
                return None
            attn, mlp = layer.self_attn, layer.mlp
            specs = {
                "qkv": _lin(attn.qkv_proj, keep),
                "o": _lin(attn.o_proj, keep),
                "gate_up": _lin(mlp.gate_up_proj, keep),
                "down": _lin(mlp.down_proj, keep),
            }
            if any(s is None for s in specs.values()):
                return None
            norms = (layer.input_layernorm.weight, layer.post_attention_layernorm.weight)
            if not all(w.dtype == torch.float32 and w.is_cpu and w.is_contiguous() for w in norms):
                return None
            keep += [*norms, kc, vc]
            self._norms += [
                (layer.input_layernorm._parameters, norms[0]),
                (layer.post_attention_layernorm._parameters, norms[1]),
            ]
            lins = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
            self._f32 += [lin for lin in lins if lin.quant is None]
            rows.append(
                {
                    **specs,
                    "in_norm": norms[0],
                    "post_norm": norms[1],
                    "k_cache": kc,
                    "v_cache": vc,
                    "window": attn.attn.layer.window,
                    "softcap": attn.attn.layer.softcap,
                    "scale": attn.attn.layer.scale,
                }
            )
        h, kvh, d = first.self_attn.shape
        inter = first.mlp.down_proj.in_features
        shape = native.Shape(
            first.input_layernorm.weight.shape[0], h, kvh, d, inter, first.input_layernorm.eps
        )
        self._rope = first.self_attn.rotary.table(torch.device("cpu"))
        keep.append(self._rope)
        return native.StackTable(shape, rows, keep)


def why_not(model: torch.nn.Module) -> str | None:
    """Why the stack's structure is not one the C driver runs (weights are seen later),
    or None where it is."""
    layers = list(getattr(model, "layers", []))
    if not layers:
        return "no layers"
    if getattr(model, "embedding_scale", 1.0) != 1.0:
        return "scaled embeddings"
    if any(layer.placement != "pre" for layer in layers):  # only pre-norm layers have both
        return "norms after the blocks"
    first = layers[0]
    if not isinstance(first.self_attn, SelfAttention) or not isinstance(first.mlp, GatedMLP):
        return "attention or MLP not the plain kind (latent attention, experts)"
    rotary, eps = first.self_attn.rotary, first.input_layernorm.eps
    shape, inter = first.self_attn.shape, first.mlp.down_proj.in_features
    for i, layer in enumerate(layers):
        attn, mlp = layer.self_attn, layer.mlp
        if layer.residual_scale != 1.0:
            return "scaled residuals"
        if type(attn) is not SelfAttention or type(mlp) is not GatedMLP:
            return f"layer {i}: attention or MLP not the plain kind (latent attention, experts)"
        if not attn.fused_decode:
            return f"layer {i}: q/k norms or a partial rotary"
        if attn.rotary is not rotary:
            return f"layer {i}: a second rope table"
        if attn.shape != shape or getattr(attn, "tp_layouts", None) is not None:
            return f"layer {i}: tensor-parallel or differently shaped attention"
        if mlp.gate is not ops.silu_and_mul:
            return f"layer {i}: a GELU gate"
        if mlp.down_proj.in_features != inter or getattr(mlp.down_proj, "tp_layouts", None):
            return f"layer {i}: tensor-parallel or differently sized MLP"
        norms = (layer.input_layernorm, layer.post_attention_layernorm)
        if any(n.eps != eps for n in norms):
            return f"layer {i}: another norm epsilon"
    return None
