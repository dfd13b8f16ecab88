"""One implementation for the Llama family (Llama, Mistral, Qwen2).

Their differences are all data in :class:`ModelSpec`: q/k/v (and o) biases, tied
embeddings, a ``head_dim`` unrelated to hidden/heads, GQA/MQA and rope scaling.
q/k/v and gate/up are fused into single matmuls; ``load_weights`` maps the Hugging Face
names onto the fused parameters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from tandem.core.attention_backend import get_attention_backend, select_attention_backend
from tandem.core.attention_metadata import AttentionMetadata
from tandem.core.layers.attention import PagedAttention
from tandem.core.layers.linear import Linear, cpu_copy, packed_linear
from tandem.core.layers.no_init import Embedding
from tandem.core.layers.norm import RMSNorm
from tandem.core.layers.rotary import RotaryEmbedding
from tandem.core.models.spec import ModelSpec
from tandem.core.models.weights import fused_shards, load_named
from tandem.kernels import ops as kernel_ops
from tandem.kernels.backends import AttentionBackend
from tandem.kernels.ops.linear import Int8Weight, PackedWeight, linear_int8

KVCache = tuple[Tensor, Tensor]

# A CPU step of more than 2 * MLP_ROWS tokens runs its MLP MLP_ROWS rows at a time: the
# [rows, 2I] activation then stays in cache between the two matmuls (SmolLM2, 4377 rows:
# 141-147 -> 177-194 GFLOP/s). Rows are independent, so the result is the same.
MLP_ROWS = 1024


class LlamaAttention(nn.Module):
    def __init__(self, spec: ModelSpec, rotary: RotaryEmbedding, dtype: torch.dtype | None) -> None:
        super().__init__()
        h, kvh, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.sizes = (h * d, kvh * d, kvh * d)
        self.shape = (h, kvh, d)
        self.qkv_proj = Linear(spec.hidden_size, sum(self.sizes), bias=spec.qkv_bias, dtype=dtype)
        self.o_proj = Linear(h * d, spec.hidden_size, bias=spec.o_bias, dtype=dtype)
        self.rotary = rotary
        self.attn = PagedAttention(h, kvh, d, scale=d**-0.5)

    def forward(
        self,
        positions: Tensor,
        x: Tensor,
        cache: KVCache,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> Tensor:
        # x: [T, C]
        t = x.shape[0]
        h, kvh, d = self.shape
        q, k, v = self.qkv_proj(x).split(self.sizes, dim=-1)
        # views into the fused projection: the rotary kernel reads them in place
        q, k = self.rotary(positions, q.reshape(t, h, d), k.reshape(t, kvh, d))
        v = v.reshape(t, kvh, d)
        out = self.attn(q, k, v, cache[0], cache[1], meta, backend)  # [T, H, D]
        return self.o_proj(out.reshape(t, h * d))


class LlamaMLP(nn.Module):
    def __init__(self, spec: ModelSpec, dtype: torch.dtype | None) -> None:
        super().__init__()
        inter = spec.intermediate_size
        self.gate_up_proj = Linear(spec.hidden_size, 2 * inter, bias=spec.mlp_bias, dtype=dtype)
        self.down_proj = Linear(inter, spec.hidden_size, bias=spec.mlp_bias, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        # x: [T, C] -> [T, C]
        t = x.shape[0]
        if t <= 2 * MLP_ROWS or x.device.type != "cpu":
            return self.rows(x)
        out = x.new_empty(t, self.down_proj.out_features)
        for start in range(0, t, MLP_ROWS):
            out[start : start + MLP_ROWS] = self.rows(x[start : start + MLP_ROWS])
        return out

    def rows(self, x: Tensor) -> Tensor:
        # x: [T, C] -> [T, 2I] -> [T, I] -> [T, C]
        return self.down_proj(kernel_ops.silu_and_mul(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, rotary: RotaryEmbedding, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(spec, rotary, dtype)
        self.mlp = LlamaMLP(spec, dtype)
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype)

    def forward(
        self,
        positions: Tensor,
        x: Tensor,
        residual: Tensor | None,
        cache: KVCache,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> tuple[Tensor, Tensor]:
        x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(positions, x, cache, meta, backend)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class LlamaModel(nn.Module):
    def __init__(self, spec: ModelSpec, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.embed_tokens = Embedding(spec.vocab_size, spec.hidden_size, dtype=dtype)
        # One rope table shared by every layer (not a parameter, see RotaryEmbedding).
        rotary = RotaryEmbedding(spec.head_dim, spec.max_position, spec.rope)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(spec, rotary, dtype) for _ in range(spec.num_layers)
        )
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, dtype)


class LlamaForCausalLM(nn.Module):
    """``forward`` -> hidden states; ``compute_logits`` -> fp32 logits. No sampler here."""

    def __init__(self, hf_config: Any, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        arch = type(self).__name__
        self.spec = ModelSpec.from_hf(hf_config, arch)
        self.model = LlamaModel(self.spec, dtype)
        self.lm_head: Linear | None = None
        if not self.spec.tie_word_embeddings:
            self.lm_head = Linear(
                self.spec.hidden_size, self.spec.vocab_size, bias=False, dtype=dtype
            )
        self._tied_pack = PackedWeight()  # the embedding's packed copy, for tied logits
        self._tied_int8: Int8Weight | None = None  # its int8 copy, after quantize("int8")
        self.attention_backend: str | None = None
        self._backends: dict[str, AttentionBackend] = {}

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor,
        kv_caches: list[KVCache],
        attn_metadata: AttentionMetadata,
    ) -> Tensor:
        # input_ids, positions: [T] long -> hidden [T, C]
        self._check_inputs(input_ids, positions, kv_caches, attn_metadata)
        backend = self._get_attention_backend(input_ids.device.type)
        x = self.model.embed_tokens(input_ids)  # [T, C]
        residual = None
        for layer, cache in zip(self.model.layers, kv_caches):
            x, residual = layer(positions, x, residual, cache, attn_metadata, backend)
        x, _ = self.model.norm(x, residual)
        return x

    def compute_logits(self, hidden: Tensor) -> Tensor:
        # hidden: [N, C] -> [N, V] fp32
        if hidden.dim() != 2 or hidden.shape[-1] != self.spec.hidden_size:
            raise ValueError(
                f"hidden must have shape [N, {self.spec.hidden_size}], got {list(hidden.shape)}"
            )
        if self.lm_head is not None:
            return self.lm_head(hidden).float()
        if self._tied_int8 is not None and hidden.device.type == "cpu":
            return linear_int8(hidden, self._tied_int8)
        return packed_linear(hidden, self.model.embed_tokens.weight, None, self._tied_pack).float()

    def prepare(self) -> None:
        """Pack every linear weight for its CPU kernel now: the engines call this while
        loading, where it overlaps the front's own start-up, instead of in the first
        step (0.3-1.3 s for SmolLM2's 121 layers)."""
        for module in self.modules():
            if isinstance(module, Linear):
                module.prepare()
        if self.lm_head is None and self._tied_int8 is None:
            cpu_copy(self.model.embed_tokens.weight, self._tied_pack)

    def quantize(self, method: str) -> int:
        """Switch the MLP projections, the attention output projection and the LM head to
        ``method`` ("int8"): int8 weights per output channel, activations quantized per
        token, outlier activations in fp32. The q/k/v projection stays as it is: on SmolLM2
        int8 there took greedy agreement with float32 from ~97% to ~95% (256 positions;
        tests/models/test_int8.py checks >= 95% on 768). Returns how many layers were switched."""
        if method != "int8":
            raise ValueError(f"quantization must be one of int8, got {method!r}")
        done = sum(layer.mlp.gate_up_proj.quantize() for layer in self.model.layers)
        done += sum(layer.mlp.down_proj.quantize() for layer in self.model.layers)
        done += sum(layer.self_attn.o_proj.quantize() for layer in self.model.layers)
        if not done:
            raise ValueError("quantization='int8' needs torch._int_mm (torch >= 2.2 on the CPU)")
        if self.lm_head is not None:
            done += self.lm_head.quantize()
        else:
            self._tied_int8 = Int8Weight.pack(self.model.embed_tokens.weight)
            done += self._tied_int8 is not None
        return done

    def _apply(self, fn: Any, recurse: bool = True) -> LlamaForCausalLM:
        self._tied_int8 = None  # .to() / .float(): float weights again, as Linear does
        return super()._apply(fn, recurse)

    def load_weights(self, weights: Iterable[tuple[str, Tensor]]) -> None:
        """Copy Hugging Face-named tensors in; errors name missing/unexpected/misshaped ones."""
        skip = {"lm_head.weight"} if self.lm_head is None else set()
        load_named(self, weights, fused_shards(self.spec), skip=skip)

    def _get_attention_backend(self, device_type: str) -> AttentionBackend:
        name = select_attention_backend(device_type)
        backend = self._backends.get(name)
        if backend is None:
            backend = self._backends[name] = get_attention_backend(name)
        self.attention_backend = name
        return backend

    def _check_inputs(
        self,
        input_ids: Tensor,
        positions: Tensor,
        kv_caches: list[KVCache],
        meta: AttentionMetadata,
    ) -> None:
        if input_ids.dim() != 1 or input_ids.dtype != torch.long:
            raise ValueError(
                f"input_ids must be a 1-D long tensor [T], got "
                f"{input_ids.dtype} of shape {list(input_ids.shape)}"
            )
        if positions.shape != input_ids.shape:
            raise ValueError(
                f"positions must have the shape of input_ids "
                f"{list(input_ids.shape)}, got {list(positions.shape)}"
            )
        if len(kv_caches) != self.spec.num_layers:
            raise ValueError(
                f"kv_caches must hold one (k_cache, v_cache) per layer "
                f"({self.spec.num_layers}), got {len(kv_caches)}"
            )
        if meta.num_tokens != input_ids.shape[0]:
            raise ValueError(
                f"attn_metadata covers {meta.num_tokens} tokens but input_ids "
                f"has {input_ids.shape[0]}"
            )


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral: Llama with its own defaults (sliding window ignored, see ModelSpec)."""


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2: Llama with q/k/v biases (set by ModelSpec for this architecture)."""
