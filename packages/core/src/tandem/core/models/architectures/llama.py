"""Llama and its close relatives: each a few fields away from Llama's spec."""

from __future__ import annotations

from typing import Any

from tandem.core.models.architectures.common import HF_COMMON, attention, llama_like
from tandem.core.models.architectures.entry import Architecture
from tandem.core.models.architectures.gguf_names import (
    LAYER,
    GGUFNames,
    Metadata,
    arch_int,
    arch_value,
    base_config,
    f32,
)
from tandem.core.spec.fields import count, number
from tandem.core.spec.model import ModelSpec


def llama(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    return llama_like(cfg, arch, max_model_len)


def mistral(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """Every layer slides over ``sliding_window`` when the config sets one."""
    return llama_like(cfg, arch, max_model_len)


def _qwen_sliding(cfg: Any) -> Any:
    """Qwen's rule where ``layer_types`` is left out: layers from ``max_window_layers`` on."""
    first = count(cfg, "max_window_layers", 28)  # 0: every layer
    return lambda i: i >= first


def qwen2(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """q/k/v biases always (no ``attention_bias`` field), none on o."""
    attn = attention(cfg, qkv_bias=True, o_bias=False)
    return llama_like(cfg, arch, max_model_len, attn, _qwen_sliding(cfg))


def qwen3(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """RMSNorm over each q and k head before rope; ``head_dim`` its own field."""
    attn = attention(cfg, qk_norm="head")
    return llama_like(cfg, arch, max_model_len, attn, _qwen_sliding(cfg))


def granite(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """Scalars on the embedding, each block's output, the scores and the logits."""
    attn = attention(cfg, scale=number(cfg, "attention_multiplier", 1.0))
    return llama_like(
        cfg,
        arch,
        max_model_len,
        attn,
        embedding_scale=number(cfg, "embedding_multiplier", 1.0),
        residual_scale=number(cfg, "residual_multiplier", 1.0),
        logits_divisor=number(cfg, "logits_scaling", 1.0),
    )


def olmo2(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """Norms after attention and after the MLP only; q/k norms over the whole projection."""
    attn = attention(cfg, qk_norm="proj")
    return llama_like(cfg, arch, max_model_len, attn, norm="post")


# -- GGUF ---------------------------------------------------------------------------------


def _llama_gguf(meta: Metadata) -> dict[str, Any]:
    """Llama, Mistral (llama.cpp keeps no window for it) and, with experts, Mixtral."""
    experts = arch_int(meta, "expert_count", 0)
    if not experts:
        return base_config(meta, "LlamaForCausalLM", "llama")
    config = base_config(meta, "MixtralForCausalLM", "mixtral")
    config["num_local_experts"] = experts
    config["num_experts_per_tok"] = arch_int(meta, "expert_used_count")
    config["sliding_window"] = None
    return config


def _qwen_gguf(architecture: str, model_type: str) -> Any:
    def read(meta: Metadata) -> dict[str, Any]:
        config = base_config(meta, architecture, model_type)
        config["use_sliding_window"] = False  # llama.cpp runs Qwen without a window
        return config

    return read


def _granite_gguf(meta: Metadata) -> dict[str, Any]:
    """Granite's multipliers under llama.cpp's names (``*_scale``)."""
    config = base_config(meta, "GraniteForCausalLM", "granite")
    for key, name in (
        ("attention.scale", "attention_multiplier"),
        ("embedding_scale", "embedding_multiplier"),
        ("residual_scale", "residual_multiplier"),
        ("logit_scale", "logits_scaling"),
    ):
        value = arch_value(meta, key)
        if value is not None:
            config[name] = f32(value)
    config["attention_bias"] = "blk.0.attn_q.bias" in meta.tensor_names
    return config


def _olmo2_gguf(meta: Metadata) -> dict[str, Any]:
    return base_config(meta, "Olmo2ForCausalLM", "olmo2")


_OLMO2_LAYER = {
    **LAYER,
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}

_MIXTRAL_LAYER = {
    **LAYER,
    "ffn_gate_inp": "block_sparse_moe.gate",
    "ffn_gate_exps": "block_sparse_moe.experts.{e}.w1",
    "ffn_up_exps": "block_sparse_moe.experts.{e}.w3",
    "ffn_down_exps": "block_sparse_moe.experts.{e}.w2",
}

GGUF = (
    GGUFNames("llama", _llama_gguf, _MIXTRAL_LAYER, rotary_rows=True),
    GGUFNames("qwen2", _qwen_gguf("Qwen2ForCausalLM", "qwen2")),
    GGUFNames("qwen3", _qwen_gguf("Qwen3ForCausalLM", "qwen3")),
    GGUFNames("granite", _granite_gguf, rotary_rows=True),
    GGUFNames("olmo2", _olmo2_gguf, _OLMO2_LAYER),
)

# each architecture of this family: its spec, names, transformers' config defaults and
# the tiny test configs that carry its traps (tandem.core.testing)
ARCHITECTURES = (
    Architecture(
        "LlamaForCausalLM",
        llama,
        hf_defaults={
            **HF_COMMON,
            "model_type": "llama",
            "intermediate_size": 11008,
            "max_position_embeddings": 2048,
        },
        tests={
            "llama": (
                "LlamaConfig",
                {  # GQA + llama3 rope scaling
                    "rope_parameters": {
                        "rope_type": "llama3",
                        "rope_theta": 500000.0,
                        "factor": 8.0,
                        "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 64,
                    },
                    "rms_norm_eps": 1e-5,
                },
            ),
        },
    ),
    Architecture(
        "MistralForCausalLM",
        mistral,
        hf_defaults={
            **HF_COMMON,
            "model_type": "mistral",
            "intermediate_size": 14336,
            "num_key_value_heads": 8,
            "max_position_embeddings": 4096 * 32,
            "sliding_window": 4096,
        },
        tests={
            "mistral": (
                "MistralConfig",
                {  # MQA + head_dim != hidden/heads + linear rope scaling
                    "num_key_value_heads": 1,
                    "head_dim": 32,
                    "rope_parameters": {
                        "rope_type": "linear",
                        "rope_theta": 1000000.0,
                        "factor": 2.0,
                    },
                    "rms_norm_eps": 1e-5,
                },
            ),
            "mistral_window": (
                "MistralConfig",
                {  # every layer slides over 8 keys
                    "num_key_value_heads": 2,
                    "sliding_window": 8,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                },
            ),
        },
    ),
    Architecture(
        "Qwen2ForCausalLM",
        qwen2,
        hf_defaults={
            **HF_COMMON,
            "model_type": "qwen2",
            "vocab_size": 151936,
            "intermediate_size": 22016,
            "max_position_embeddings": 32768,
            "use_sliding_window": False,
            "sliding_window": 4096,
            "max_window_layers": 28,
            "bos_token_id": None,
            "eos_token_id": None,
        },
        tests={
            "qwen2": (
                "Qwen2Config",
                {  # q/k/v bias + tied embeddings
                    "tie_word_embeddings": True,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
                    "rms_norm_eps": 1e-6,
                },
            ),
            "qwen2_window": (
                "Qwen2Config",
                {  # the layers from max_window_layers on slide; q/k/v biases
                    "use_sliding_window": True,
                    "sliding_window": 6,
                    "max_window_layers": 1,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                },
            ),
        },
    ),
    Architecture(
        "Qwen3ForCausalLM",
        qwen3,
        hf_defaults={
            **HF_COMMON,
            "model_type": "qwen3",
            "vocab_size": 151936,
            "intermediate_size": 22016,
            "max_position_embeddings": 32768,
            "head_dim": 128,
            "use_sliding_window": False,
            "sliding_window": 4096,
            "max_window_layers": 28,
            "bos_token_id": None,
            "eos_token_id": None,
        },
        tests={
            "qwen3": (
                "Qwen3Config",
                {  # q/k RMSNorm per head; head_dim 24 (not 64 / 4); odd GQA groups (6 / 2)
                    "num_attention_heads": 6,
                    "num_key_value_heads": 2,
                    "head_dim": 24,
                    "tie_word_embeddings": True,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
                },
            ),
        },
    ),
    Architecture(
        "GraniteForCausalLM",
        granite,
        hf_defaults={
            **HF_COMMON,
            "model_type": "granite",
            "intermediate_size": 11008,
            "max_position_embeddings": 2048,
            "embedding_multiplier": 1.0,
            "residual_multiplier": 1.0,
            "attention_multiplier": 1.0,
            "logits_scaling": 1.0,
        },
        tests={
            "granite": (
                "GraniteConfig",
                {  # every multiplier far from 1; biases on attention
                    "embedding_multiplier": 6.0,
                    "residual_multiplier": 0.35,
                    "attention_multiplier": 0.05,
                    "logits_scaling": 4.0,
                    "attention_bias": True,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                },
            ),
        },
    ),
    Architecture(
        "Olmo2ForCausalLM",
        olmo2,
        hf_defaults={
            **HF_COMMON,
            "model_type": "olmo2",
            "vocab_size": 50304,
            "intermediate_size": 11008,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5,
            "bos_token_id": None,
            "eos_token_id": 50279,
            "pad_token_id": 1,
        },
        tests={
            "olmo2": (
                "Olmo2Config",
                {  # norms after each block only; q/k norms over the whole projection
                    "num_key_value_heads": 1,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
                },
            ),
        },
    ),
)
