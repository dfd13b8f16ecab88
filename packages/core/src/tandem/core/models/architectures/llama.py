"""Llama and its close relatives: each a few fields away from Llama's spec."""

from __future__ import annotations

from typing import Any

from tandem.core.models.architectures.common import attention, llama_like
from tandem.core.models.architectures.gguf_names import (
    LAYER,
    GGUFNames,
    Metadata,
    arch_int,
    arch_value,
    base_config,
    f32,
)
from tandem.core.models.fields import count, number
from tandem.core.models.spec import ModelSpec


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
