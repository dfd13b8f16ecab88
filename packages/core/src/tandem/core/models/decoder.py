"""The decoder stack built from a :class:`ModelSpec`: embedding, layers, final norm.

A layer's input is carried as ``(x, residual)`` whose sum is the hidden state (the
residual is None before the first layer), so a norm that follows a residual add runs as
one fused add-and-norm kernel, as in the Llama family's pre-norm layers.

Given a :class:`~tandem.core.parallel.group.TensorParallel`, the blocks hold this rank's
shard and sum their outputs over the ranks; the norms and the residual stream are whole
on every rank.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tandem.core.layers.attention_metadata import AttentionMetadata
from tandem.core.layers.embedding import Embedding
from tandem.core.layers.mlp import GatedMLP
from tandem.core.layers.norm import RMSNorm
from tandem.core.layers.parallel import VocabParallelEmbedding
from tandem.core.layers.rotary import RotaryEmbedding
from tandem.core.layers.self_attention import KVCache, SelfAttention
from tandem.core.models.decode_stack import DecodeStack
from tandem.core.parallel.group import TensorParallel
from tandem.core.spec.model import MLPSpec, ModelSpec
from tandem.kernels.backends import AttentionBackend
from tandem.kernels.native.elementwise import add_rms_norm


def build_mlp(
    spec: ModelSpec, mlp: MLPSpec, dtype: torch.dtype | None, tp: TensorParallel | None = None
) -> nn.Module:
    if mlp.moe is not None:
        from tandem.core.layers.moe import SparseMoE

        return SparseMoE(spec.hidden_size, mlp, dtype, tp)
    return GatedMLP(spec.hidden_size, mlp.intermediate_size, mlp.activation, mlp.bias, dtype, tp)


class DecoderLayer(nn.Module):
    """Attention then MLP, with the norms where ``spec.norm`` puts them:

    * ``pre``: norm -> block -> add (Llama);
    * ``sandwich``: norm -> block -> norm -> add (Gemma);
    * ``post``: block -> norm -> add (OLMo 2).

    The norms keep the checkpoints' names (Llama's ``post_attention_layernorm`` is the
    norm before its MLP; in the other two it follows the attention).
    """

    def __init__(
        self,
        spec: ModelSpec,
        index: int,
        rotary: RotaryEmbedding,
        dtype: torch.dtype | None,
        tp: TensorParallel | None = None,
    ) -> None:
        super().__init__()
        c, eps = spec.hidden_size, spec.rms_norm_eps
        window = spec.layers[index].window
        self.placement = spec.norm
        self.residual_scale = spec.residual_scale
        if spec.attention.latent is not None:
            from tandem.core.layers.latent_attention import LatentAttention

            self.self_attn = LatentAttention(spec.attention, c, rotary, eps, dtype, tp)
        else:
            self.self_attn = SelfAttention(spec.attention, c, rotary, eps, window, dtype, tp)
        self.mlp = build_mlp(spec, spec.layer_mlp(index), dtype, tp)
        if spec.norm in ("pre", "sandwich"):
            self.input_layernorm = RMSNorm(c, eps, dtype)
        self.post_attention_layernorm = RMSNorm(c, eps, dtype)
        if spec.norm == "sandwich":
            self.pre_feedforward_layernorm = RMSNorm(c, eps, dtype)
        if spec.norm in ("sandwich", "post"):
            self.post_feedforward_layernorm = RMSNorm(c, eps, dtype)

    def forward(
        self,
        positions: Tensor,
        x: Tensor,
        residual: Tensor | None,
        cache: KVCache,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> tuple[Tensor, Tensor]:
        # x, residual: [T, C] -> the block output and the residual it is to be added to
        if self.placement == "pre":
            x, residual = self.input_layernorm(x, residual)
            x = self._scaled(self.self_attn(positions, x, cache, meta, backend))
            x, residual = self.post_attention_layernorm(x, residual)
            return self._scaled(self.mlp(x)), residual
        if self.placement == "sandwich":
            x, residual = self.input_layernorm(x, residual)
            x, _ = self.post_attention_layernorm(self.self_attn(positions, x, cache, meta, backend))
            x, residual = self.pre_feedforward_layernorm(self._scaled(x), residual)
            x, _ = self.post_feedforward_layernorm(self.mlp(x))
            return self._scaled(x), residual
        hidden = x if residual is None else x + residual
        x, _ = self.post_attention_layernorm(
            self.self_attn(positions, hidden, cache, meta, backend)
        )
        hidden = hidden + self._scaled(x)
        x, _ = self.post_feedforward_layernorm(self.mlp(hidden))
        return self._scaled(x), hidden

    def _scaled(self, x: Tensor) -> Tensor:
        return x if self.residual_scale == 1.0 else x.mul_(self.residual_scale)


class DecoderModel(nn.Module):
    def __init__(
        self, spec: ModelSpec, dtype: torch.dtype | None, tp: TensorParallel | None = None
    ) -> None:
        super().__init__()
        self.embedding_scale = spec.embedding_scale
        if tp is None:
            self.embed_tokens = Embedding(spec.vocab_size, spec.hidden_size, dtype=dtype)
        else:
            self.embed_tokens = VocabParallelEmbedding(spec.vocab_size, spec.hidden_size, tp, dtype)
        # One rope table per distinct rope (not a parameter, see RotaryEmbedding).
        ropes: dict[object, RotaryEmbedding] = {}
        for layer in spec.layers:
            if layer.rope not in ropes:
                dim = spec.attention.rope_dim
                ropes[layer.rope] = RotaryEmbedding(dim, spec.max_position, layer.rope)
        self.layers = nn.ModuleList(
            DecoderLayer(spec, i, ropes[layer.rope], dtype, tp)
            for i, layer in enumerate(spec.layers)
        )
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype)
        # decode-only steps in one C call, where it fits
        self.decode_stack = DecodeStack(self, spec, tp)
        self.use_decode_stack = True  # the engine's choice (CausalLM.use_kernels)

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor,
        kv_caches: list[KVCache],
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> Tensor:
        # input_ids, positions: [T] long -> hidden [T, C]
        x = self.embed_tokens(input_ids)  # [T, C]
        if self.embedding_scale != 1.0:  # the scale rounded to the weights' dtype (Gemma)
            x = x * torch.tensor(self.embedding_scale, dtype=x.dtype)
        done = None
        if self.use_decode_stack and backend.name == "cpu":
            done = self.decode_stack.run(x, positions, kv_caches, meta)
        if done is not None:
            x, residual = done
            # the stack's rows are fresh fp32 CPU tensors: the final norm is the norm op's
            # own C kernel called straight (the op's checks and call cost ~4x the kernel)
            if type(self.norm) is RMSNorm:
                normed = add_rms_norm(x, residual, self.norm.weight, self.norm.eps)
                if normed is not None:
                    return normed[0]
        else:
            residual = None
            for layer, cache in zip(self.layers, kv_caches):
                x, residual = layer(positions, x, residual, cache, meta, backend)
        x, _ = self.norm(x, residual)
        return x
