"""A decoder-only model as data: what every layer is made of, read once from a config.

Every architecture is one :class:`ModelSpec`: which attention (heads, biases, q/k norms,
scale, soft-capping, a sliding window per layer), which MLP (gated with SiLU or GELU, or
a mixture of experts), where the norms sit, the scalars some families multiply by, and
the rope of each layer. :func:`tandem.core.models.architectures.build_spec` turns a config
into a spec (the arrow runs from the architectures to this module, never back);
:mod:`tandem.core.models.decoder` builds the model from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.core.spec.rope import RopeSpec, read_rope

NORM_PLACEMENTS = ("pre", "sandwich", "post")
QK_NORMS = ("none", "head", "proj")
ACTIVATIONS = ("silu", "gelu_tanh")


@dataclass(frozen=True, slots=True)
class LatentSpec:
    """Multi-head latent attention (DeepSeek): K and V come from a per-token latent of
    ``kv_lora_rank`` values (plus a shared rotated key of ``qk_rope_head_dim``), which is
    all the KV cache keeps."""

    q_lora_rank: int | None  # None: q projected straight from the hidden state
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    interleaved: bool = True  # the checkpoint's rotary dims come in (x0, x1) pairs


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    num_heads: int
    num_kv_heads: int  # of the KV cache (latent attention: 1)
    head_dim: int  # of the KV cache (latent attention: half the latent row, see ops.latent)
    scale: float  # multiplies q.k (head_dim ** -0.5 unless the family says otherwise)
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: str = "none"  # "head": RMSNorm over each head; "proj": over the whole projection
    softcap: float | None = None  # scores -> softcap * tanh(scores / softcap)
    latent: LatentSpec | None = None

    @property
    def rope_dim(self) -> int:
        """The head size rope works on (before any partial rotary factor)."""
        return self.latent.qk_rope_head_dim if self.latent else self.head_dim


@dataclass(frozen=True, slots=True)
class MoESpec:
    num_experts: int
    top_k: int
    intermediate_size: int  # of each routed expert
    norm_topk_prob: bool  # renormalise the chosen experts' weights to sum to 1
    shared_intermediate_size: int = 0  # 0: no shared expert
    shared_gate: bool = False  # the shared expert's output scaled by sigmoid(x . w)
    scoring: str = "softmax"  # or "sigmoid": DeepSeek's group-limited sigmoid routing
    n_group: int = 1  # sigmoid: experts in n_group groups, the topk_group best kept
    topk_group: int = 1
    routed_scaling: float = 1.0  # sigmoid: the routed experts' weights are scaled by it
    score_bias: bool = False  # sigmoid: a per-expert correction added for the choice only


@dataclass(frozen=True, slots=True)
class MLPSpec:
    intermediate_size: int  # of the dense MLP (unused by a mixture of experts)
    activation: str = "silu"  # of the gate: silu (SwiGLU) or gelu_tanh (GeGLU)
    bias: bool = False
    moe: MoESpec | None = None


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """What may differ from one layer to the next."""

    rope: RopeSpec
    window: int | None = None  # sliding window: a query sees its last `window` keys
    mlp: MLPSpec | None = None  # None: the model's MLP


@dataclass(frozen=True, slots=True)
class ModelSpec:
    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    max_position: int  # rope table rows: the configured context, else the model's limit
    rms_norm_eps: float
    attention: AttentionSpec
    mlp: MLPSpec
    layers: tuple[LayerSpec, ...]
    norm: str = "pre"  # pre: Llama; sandwich: pre and post (Gemma); post: after (OLMo 2)
    norm_offset: float = 0.0  # a norm multiplies by (offset + weight): Gemma's 1
    tie_word_embeddings: bool = False
    embedding_scale: float = 1.0
    residual_scale: float = 1.0  # each block's output is scaled before the residual add
    logits_divisor: float = 1.0
    final_softcap: float | None = None

    @property
    def num_heads(self) -> int:
        return self.attention.num_heads

    @property
    def num_kv_heads(self) -> int:
        return self.attention.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.attention.head_dim

    @property
    def rope(self) -> RopeSpec:
        return self.layers[0].rope

    def layer_mlp(self, index: int) -> MLPSpec:
        return self.layers[index].mlp or self.mlp

    @property
    def windows(self) -> tuple[int | None, ...]:
        return tuple(layer.window for layer in self.layers)


__all__ = [
    "ACTIVATIONS",
    "NORM_PLACEMENTS",
    "QK_NORMS",
    "AttentionSpec",
    "LatentSpec",
    "LayerSpec",
    "MLPSpec",
    "MoESpec",
    "ModelSpec",
    "RopeSpec",
    "read_rope",
]
