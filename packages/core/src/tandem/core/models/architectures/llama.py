"""Llama and its close relatives: each a few fields away from Llama's spec."""

from __future__ import annotations

from typing import Any

from tandem.core.models.architectures.common import attention, llama_like
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
