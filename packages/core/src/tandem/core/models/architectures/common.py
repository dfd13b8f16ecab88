"""The reading every architecture shares: shapes, the Llama-style attention and MLP, windows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tandem.core.models.weights import NameMap, fused
from tandem.core.spec.fields import flag, layer_types, optional_int, positive_int
from tandem.core.spec.model import AttentionSpec, LayerSpec, MLPSpec, ModelSpec
from tandem.core.spec.rope import read_rope

# config spellings of the gate activations the kernels run
_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_tanh": "gelu_tanh",
}


def activation(hf_config: Any, name: str = "hidden_act") -> str:
    value = getattr(hf_config, name, None) or "silu"
    if value not in _ACTIVATIONS:
        raise ValueError(f"config.{name} must be one of {', '.join(_ACTIVATIONS)}, got {value!r}")
    return _ACTIVATIONS[value]


def attention(hf_config: Any, qkv_bias: bool = False, **fields: Any) -> AttentionSpec:
    """Heads, head size and biases as most families spell them; ``fields`` override."""
    hidden = positive_int(hf_config, "hidden_size")
    heads = positive_int(hf_config, "num_attention_heads")
    kv_heads = optional_int(hf_config, "num_key_value_heads", heads) or heads
    head_dim = optional_int(hf_config, "head_dim") or hidden // heads
    if heads % kv_heads:
        raise ValueError(
            f"num_key_value_heads must be a positive divisor of num_attention_heads "
            f"({heads}), got {kv_heads}"
        )
    if head_dim % 2:
        raise ValueError(f"head_dim must be even for rotary embeddings, got {head_dim}")
    bias = flag(hf_config, "attention_bias")
    base: dict[str, Any] = {
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "scale": head_dim**-0.5,
        "qkv_bias": qkv_bias or bias,
        "o_bias": bias,
    }
    return AttentionSpec(**{**base, **fields})


def dense_mlp(hf_config: Any, act_field: str = "hidden_act") -> MLPSpec:
    return MLPSpec(
        intermediate_size=positive_int(hf_config, "intermediate_size"),
        activation=activation(hf_config, act_field),
        bias=flag(hf_config, "mlp_bias"),
    )


def sliding_window(hf_config: Any) -> int | None:
    """The window, or None where the config has none or switches it off."""
    if getattr(hf_config, "use_sliding_window", True) is False:
        return None
    value = getattr(hf_config, "sliding_window", None)
    return None if value in (None, 0) else optional_int(hf_config, "sliding_window")


def windows(
    hf_config: Any, num_layers: int, sliding: Callable[[int], bool] | None = None
) -> list[int | None]:
    """Each layer's window: by ``config.layer_types`` where the family lists them (and
    ``sliding(i)`` decides where the config leaves them out), else every layer's."""
    window = sliding_window(hf_config)
    if window is None:
        return [None] * num_layers
    if sliding is None:
        return [window] * num_layers
    types = layer_types(hf_config, num_layers)
    if types is None:
        return [window if sliding(i) else None for i in range(num_layers)]
    return [window if t == "sliding_attention" else None for t in types]


def rope_positions(hf_config: Any, max_model_len: int | None) -> int:
    """How many positions the rope tables cover: the context the engine runs with when it
    is known, else the model's own ``max_position_embeddings``. A table is
    ``positions x rotary dims`` float32 per distinct rope, so a model with a long native
    context (Gemma 3: 32k positions, two ropes of 256 dims, 64 MiB) pays for it only when
    it runs that long."""
    limit = positive_int(hf_config, "max_position_embeddings")
    if max_model_len is None:
        return limit
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 1:
        raise ValueError(f"max_model_len must be a positive int or None, got {max_model_len!r}")
    return max_model_len


def llama_like(
    hf_config: Any,
    arch: str,
    max_model_len: int | None,
    attn: AttentionSpec | None = None,
    sliding: Callable[[int], bool] | None = None,
    default_theta: float = 10000.0,
    **fields: Any,
) -> ModelSpec:
    """A Llama-shaped spec (pre-norms, SwiGLU, one rope); ``fields`` override ModelSpec's."""
    layers = positive_int(hf_config, "num_hidden_layers")
    rope = read_rope(hf_config, default_theta=default_theta, max_model_len=max_model_len)
    base: dict[str, Any] = {
        "architecture": arch,
        "vocab_size": positive_int(hf_config, "vocab_size"),
        "hidden_size": positive_int(hf_config, "hidden_size"),
        "num_layers": layers,
        "max_position": rope_positions(hf_config, max_model_len),
        "rms_norm_eps": float(getattr(hf_config, "rms_norm_eps", None) or 1e-6),
        "attention": attn or attention(hf_config),
        "mlp": dense_mlp(hf_config),
        "layers": tuple(LayerSpec(rope, w) for w in windows(hf_config, layers, sliding)),
        "tie_word_embeddings": flag(hf_config, "tie_word_embeddings"),
    }
    return ModelSpec(**{**base, **fields})


def split_qkv_gate_up(spec: ModelSpec) -> NameMap:
    """Separate q/k/v and gate/up checkpoint projections into our fused ones."""
    a = spec.attention
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    inter = spec.mlp.intermediate_size
    return {
        **fused(
            [("self_attn.q_proj", q), ("self_attn.k_proj", kv), ("self_attn.v_proj", kv)],
            "self_attn.qkv_proj",
        ),
        **fused([("mlp.gate_proj", inter), ("mlp.up_proj", inter)], "mlp.gate_up_proj"),
    }


# transformers' config defaults most architectures share (see Architecture.hf_defaults)
HF_COMMON: dict[str, Any] = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "head_dim": None,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "rope_scaling": None,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
