"""Phi-3 and Phi-4-mini: q/k/v and gate/up fused in the checkpoint, partial rotary, longrope."""

from __future__ import annotations

from typing import Any

from tandem.core.models.architectures.common import HF_COMMON, llama_like
from tandem.core.models.architectures.entry import Architecture
from tandem.core.models.architectures.gguf_names import (
    LAYER,
    GGUFNames,
    Metadata,
    arch_int,
    arch_value,
    base_config,
    f32,
    window_of,
)
from tandem.core.models.weights import NameMap
from tandem.core.spec.model import ModelSpec

ROPE_TYPES = ("default", "longrope")  # what transformers' Phi-3 accepts


def phi3(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """Every layer slides when ``sliding_window`` is set (Phi-3-mini: 2047)."""
    spec = llama_like(cfg, arch, max_model_len)
    if spec.rope.type not in ROPE_TYPES:
        raise ValueError(
            f"rope_type must be one of {', '.join(ROPE_TYPES)} for {arch}, got {spec.rope.type!r}"
        )
    return spec


def phi3_names(spec: ModelSpec) -> NameMap:
    """The checkpoint's fused projections are ours as they are (gate rows, then up)."""
    return {}


def _phi3_gguf(meta: Metadata) -> dict[str, Any]:
    """Partial rotary from the rope dimension count; longrope's factors are tensors."""
    config = base_config(meta, "Phi3ForCausalLM", "phi3")
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    config["head_dim"] = head_dim
    partial = arch_int(meta, "rope.dimension_count", head_dim) / head_dim
    rope = config["rope_parameters"]
    rope["partial_rotary_factor"] = partial
    config["partial_rotary_factor"] = partial
    original = arch_value(meta, "rope.scaling.original_context_length")
    if "rope_factors_long.weight" in meta.tensor_names:
        rope.update(
            rope_type="longrope",
            long_factor=meta.floats("rope_factors_long.weight"),
            short_factor=meta.floats("rope_factors_short.weight"),
            original_max_position_embeddings=int(original or config["max_position_embeddings"]),
        )
        config["original_max_position_embeddings"] = rope["original_max_position_embeddings"]
        factor = arch_value(meta, "rope.scaling.attn_factor")
        if factor is not None:
            rope["attention_factor"] = f32(factor)
    elif original:
        config["original_max_position_embeddings"] = int(original)
    config["sliding_window"] = window_of(meta)  # 0 (Phi-4-mini): none
    return config


GGUF = (
    GGUFNames(
        "phi3",
        _phi3_gguf,
        {**LAYER, "attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
        ignored=("rope_factors_long.weight", "rope_factors_short.weight"),
    ),
)

# each architecture of this family: its spec, names, transformers' config defaults and
# the tiny test configs that carry its traps (tandem.core.testing)
ARCHITECTURES = (
    Architecture(
        "Phi3ForCausalLM",
        phi3,
        names=phi3_names,
        hf_defaults={
            **HF_COMMON,
            "model_type": "phi3",
            "vocab_size": 32064,
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "max_position_embeddings": 4096,
            "original_max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "sliding_window": None,
            "eos_token_id": 32000,
            "pad_token_id": 32000,
        },
        tests={
            "phi3": (
                "Phi3Config",
                {  # fused qkv and gate_up; 3/4 of each head rotates; longrope; a window of 10
                    "num_key_value_heads": 2,
                    "original_max_position_embeddings": 64,
                    "sliding_window": 10,
                    "rope_parameters": {
                        "rope_type": "longrope",
                        "rope_theta": 10000.0,
                        "partial_rotary_factor": 0.75,
                        "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                        "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0],
                    },
                },
            ),
        },
    ),
)
