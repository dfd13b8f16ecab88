"""The shape of a Llama-family model, read once from a Hugging Face config.

Llama, Mistral and Qwen2 share one implementation; everything that differs between
them (biases, tied embeddings, head size, rope settings) is a field here. Reading the
config in one place keeps the legacy spellings (``rope_theta``/``rope_scaling`` on the
config itself) and transformers 5's ``rope_parameters`` dict from leaking into the model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

ROPE_TYPES = ("default", "linear", "llama3")

# Per-architecture facts that are not spelled out in config.json.
_ARCH_DEFAULTS: dict[str, dict[str, bool]] = {
    "LlamaForCausalLM": {"qkv_bias": False},
    "MistralForCausalLM": {"qkv_bias": False},
    "Qwen2ForCausalLM": {"qkv_bias": True},
}


@dataclass(frozen=True, slots=True)
class RopeSpec:
    theta: float
    type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass(frozen=True, slots=True)
class ModelSpec:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position: int
    rope: RopeSpec
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool

    @classmethod
    def from_hf(cls, hf_config: Any, architecture: str | None = None) -> ModelSpec:
        arch = architecture or _first_architecture(hf_config)
        if arch not in _ARCH_DEFAULTS:
            raise ValueError(
                f"architecture must be one of {', '.join(sorted(_ARCH_DEFAULTS))}, got {arch!r}"
            )
        hidden = _int(hf_config, "hidden_size")
        heads = _int(hf_config, "num_attention_heads")
        kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads
        head_dim = getattr(hf_config, "head_dim", None) or hidden // heads
        if kv_heads <= 0 or heads % kv_heads:
            raise ValueError(
                f"num_key_value_heads must be a positive divisor of num_attention_heads "
                f"({heads}), got {kv_heads}"
            )
        if head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {head_dim}")
        attention_bias = bool(getattr(hf_config, "attention_bias", False))
        _warn_sliding_window(hf_config)
        return cls(
            architecture=arch,
            vocab_size=_int(hf_config, "vocab_size"),
            hidden_size=hidden,
            intermediate_size=_int(hf_config, "intermediate_size"),
            num_layers=_int(hf_config, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=int(kv_heads),
            head_dim=int(head_dim),
            rms_norm_eps=float(getattr(hf_config, "rms_norm_eps", 1e-6)),
            max_position=_int(hf_config, "max_position_embeddings"),
            rope=read_rope(hf_config),
            qkv_bias=_ARCH_DEFAULTS[arch]["qkv_bias"] or attention_bias,
            o_bias=attention_bias,
            mlp_bias=bool(getattr(hf_config, "mlp_bias", False)),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        )


def read_rope(hf_config: Any) -> RopeSpec:
    """Rope settings from ``rope_parameters`` (transformers 5) or the legacy attributes."""
    params = getattr(hf_config, "rope_parameters", None)
    if params is None:
        params = dict(getattr(hf_config, "rope_scaling", None) or {})
    else:
        params = dict(params)
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    theta = 10000.0 if theta is None else float(theta)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type must be one of {', '.join(ROPE_TYPES)}, got {rope_type!r}")
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError(
            "partial_rotary_factor must be 1.0 for Llama-family models, "
            f"got {params['partial_rotary_factor']!r}"
        )
    if rope_type == "default":
        return RopeSpec(theta=theta)
    factor = float(params.get("factor", 1.0))
    if factor <= 0:
        raise ValueError(f"rope factor must be > 0, got {factor}")
    if rope_type == "linear":
        return RopeSpec(theta=theta, type="linear", factor=factor)
    low = float(params.get("low_freq_factor", 1.0))
    high = float(params.get("high_freq_factor", 4.0))
    if high <= low:
        raise ValueError(
            f"llama3 rope needs high_freq_factor > low_freq_factor, got {high} <= {low}"
        )
    original = params.get("original_max_position_embeddings")
    if original is None:
        original = _int(hf_config, "max_position_embeddings")
    return RopeSpec(
        theta=theta,
        type="llama3",
        factor=factor,
        low_freq_factor=low,
        high_freq_factor=high,
        original_max_position=int(original),
    )


def _first_architecture(hf_config: Any) -> str:
    archs = getattr(hf_config, "architectures", None) or []
    if not archs:
        raise ValueError(
            "config.architectures must name the model class (one of "
            f"{', '.join(sorted(_ARCH_DEFAULTS))}), got {archs!r}"
        )
    return str(archs[0])


def _int(hf_config: Any, name: str) -> int:
    value = getattr(hf_config, name, None)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"config.{name} must be a positive integer, got {value!r}")
    return value


def _warn_sliding_window(hf_config: Any) -> None:
    """Sliding-window attention is not implemented: every token sees its whole context.

    That is exact as long as sequences stay within the window, which holds for every
    model whose window is at least ``max_position_embeddings``.
    """
    window = getattr(hf_config, "sliding_window", None)
    enabled = getattr(hf_config, "use_sliding_window", True)
    max_pos = getattr(hf_config, "max_position_embeddings", None)
    if enabled and window and max_pos and window < max_pos:
        logger.warning(
            "sliding_window=%s is ignored (full attention); outputs differ from the "
            "reference for sequences longer than the window",
            window,
        )
