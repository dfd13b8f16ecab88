"""Gemma 2 and Gemma 3 (text): norms before and after each block, GeGLU, scaled embeddings.

Both multiply norms by ``1 + weight`` (the checkpoint stores the offset from 1), scale
the scores by ``query_pre_attn_scalar ** -0.5`` and alternate sliding and global layers.
Gemma 2 soft-caps the scores and the logits; Gemma 3 norms q and k per head instead of
capping the scores (its ``attn_logit_softcapping`` is read by transformers but unused),
and rotates its local and global layers with their own rope bases.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tandem.core.models.architectures.common import HF_COMMON, activation, attention, llama_like
from tandem.core.models.architectures.entry import Architecture
from tandem.core.models.architectures.gguf_names import (
    LAYER,
    GGUFNames,
    Metadata,
    arch_value,
    base_config,
    f32,
    rope_parameters,
    window_of,
)
from tandem.core.spec.fields import layer_types, number, optional_positive, positive_int
from tandem.core.spec.model import ModelSpec
from tandem.core.spec.rope import read_rope


def _gemma(cfg: Any, arch: str, max_model_len: int | None, every: int, **attn: Any) -> ModelSpec:
    if getattr(cfg, "use_bidirectional_attention", False):
        raise ValueError(
            f"config.use_bidirectional_attention must be false for {arch} (a causal LM), got "
            f"{cfg.use_bidirectional_attention!r}"
        )
    hidden = positive_int(cfg, "hidden_size")
    spec = llama_like(
        cfg,
        arch,
        max_model_len,
        attention(cfg, scale=number(cfg, "query_pre_attn_scalar", 256.0) ** -0.5, **attn),
        sliding=lambda i: bool((i + 1) % every),
        norm="sandwich",
        norm_offset=1.0,
        embedding_scale=float(hidden**0.5),
        final_softcap=optional_positive(cfg, "final_logit_softcapping"),
    )
    mlp = replace(spec.mlp, activation=activation(cfg, "hidden_activation"))
    return replace(spec, mlp=mlp)


def gemma2(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    softcap = optional_positive(cfg, "attn_logit_softcapping")
    return _gemma(cfg, arch, max_model_len, every=2, softcap=softcap)


def gemma3(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    every = int(getattr(cfg, "sliding_window_pattern", None) or 6)
    spec = _gemma(cfg, arch, max_model_len, every=every, qk_norm="head")
    types = layer_types(cfg, spec.num_layers)
    if types is None:
        types = [
            "sliding_attention" if (i + 1) % every else "full_attention"
            for i in range(spec.num_layers)
        ]
    local = read_rope(_Gemma3Local(cfg), "sliding_attention", 10000.0, max_model_len)
    global_ = read_rope(cfg, "full_attention", 1000000.0, max_model_len)
    layers = tuple(
        replace(layer, rope=local if kind == "sliding_attention" else global_)
        for layer, kind in zip(spec.layers, types)
    )
    return replace(spec, layers=layers)


class _Gemma3Local:
    """The config as the local layers' rope reads it: older checkpoints give their base
    as ``rope_local_base_freq`` and no scaling (``rope_scaling`` is the global layers')."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg
        self.rope_theta = getattr(cfg, "rope_local_base_freq", None)
        self.rope_parameters = getattr(cfg, "rope_parameters", None) or {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cfg, name)


# -- GGUF ---------------------------------------------------------------------------------
# llama.cpp's converter folds the norms' 1 into their weights (taken off again), keeps no
# query_pre_attn_scalar (llama.cpp scales by the head size, or by hidden / heads for the
# 27B models), and writes the sliding-window pattern only where it is not the default.


def _gemma_gguf(meta: Metadata, architecture: str, model_type: str, every: int) -> dict:
    config = base_config(meta, architecture, model_type)
    big = config["num_hidden_layers"] in _LAYERS_27B
    heads = config["num_attention_heads"]
    config["query_pre_attn_scalar"] = config["hidden_size"] // heads if big else config["head_dim"]
    config["hidden_activation"] = "gelu_pytorch_tanh"
    pattern = arch_value(meta, "attention.sliding_window_pattern", every)
    layers = config["num_hidden_layers"]
    if isinstance(pattern, list):
        sliding = [bool(p) for p in pattern]
    else:  # every n-th layer global, the others local
        sliding = [(i % int(pattern)) < int(pattern) - 1 for i in range(layers)]
    config["layer_types"] = ["sliding_attention" if s else "full_attention" for s in sliding]
    return config


_LAYERS_27B = (46, 62)  # Gemma 2 27B, Gemma 3 27B


def _gemma2_gguf(meta: Metadata) -> dict[str, Any]:
    config = _gemma_gguf(meta, "Gemma2ForCausalLM", "gemma2", every=2)
    config["sliding_window"] = window_of(meta) or 4096  # llama.cpp's default for Gemma 2
    config["attn_logit_softcapping"] = f32(arch_value(meta, "attn_logit_softcapping", 50.0))
    config["final_logit_softcapping"] = f32(arch_value(meta, "final_logit_softcapping", 30.0))
    return config


def _gemma3_gguf(meta: Metadata) -> dict[str, Any]:
    config = _gemma_gguf(meta, "Gemma3ForCausalLM", "gemma3_text", every=6)
    window = window_of(meta)
    config["sliding_window"] = window
    if window is None:
        config["layer_types"] = ["full_attention"] * config["num_hidden_layers"]
    cap = arch_value(meta, "final_logit_softcapping")
    config["final_logit_softcapping"] = f32(cap) if cap else None
    config["attn_logit_softcapping"] = None
    local = f32(arch_value(meta, "rope.freq_base_swa", 10000.0))
    config["rope_parameters"] = {
        "full_attention": rope_parameters(meta, 1000000.0),
        "sliding_attention": {"rope_type": "default", "rope_theta": local},
    }
    return config


_GEMMA_LAYER = {
    **LAYER,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}

GGUF = (
    GGUFNames("gemma2", _gemma2_gguf, _GEMMA_LAYER, norm_shift=1.0),
    GGUFNames("gemma3", _gemma3_gguf, _GEMMA_LAYER, norm_shift=1.0),
)


_GEMMA: dict[str, Any] = {
    **HF_COMMON,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "tie_word_embeddings": True,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
}


# each architecture of this family: its spec, names, transformers' config defaults and
# the tiny test configs that carry its traps (tandem.core.testing)
ARCHITECTURES = (
    Architecture(
        "Gemma2ForCausalLM",
        gemma2,
        hf_defaults={
            **_GEMMA,
            "model_type": "gemma2",
            "vocab_size": 256000,
            "max_position_embeddings": 8192,
            "final_logit_softcapping": 30.0,
            "attn_logit_softcapping": 50.0,
        },
        tests={
            "gemma2": (
                "Gemma2Config",
                {  # soft caps that bite, query_pre_attn_scalar != head_dim, local layers of 8
                    "head_dim": 32,
                    "query_pre_attn_scalar": 20,
                    "attn_logit_softcapping": 1.5,
                    "final_logit_softcapping": 4.0,
                    "sliding_window": 8,
                    "hidden_activation": "gelu_pytorch_tanh",
                },
            ),
        },
    ),
    Architecture(
        "Gemma3ForCausalLM",
        gemma3,
        hf_defaults={
            **_GEMMA,
            "model_type": "gemma3_text",
            "vocab_size": 262208,
            "max_position_embeddings": 131072,
            "final_logit_softcapping": None,
            "attn_logit_softcapping": None,
        },
        tests={
            "gemma3": (
                "Gemma3TextConfig",
                {  # local/global layers with their own rope; q/k norms; attention soft cap unused
                    "head_dim": 32,
                    "query_pre_attn_scalar": 24,
                    "sliding_window": 8,
                    "layer_types": ["sliding_attention", "full_attention"],
                    "attn_logit_softcapping": 1.0,
                    "final_logit_softcapping": 6.0,
                    "rope_parameters": {
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                    },
                },
            ),
        },
    ),
)
