"""``config.json`` read as transformers reads it, without importing transformers.

The engine reads a few dozen fields of the config (shapes, rope, eos ids, dtype), and
importing transformers' config machinery to get them costs 1.5-2 s of start-up (it
pulls in ``torch.distributed``), on the critical path of every ``LLM(...)``. The fields
a config.json leaves out take transformers' defaults for its architecture, written
down here; ``tests/core/test_hf_config.py`` holds them equal to transformers' own, field
by field, for every supported architecture.

The result is a plain namespace: every key of config.json as an attribute, the
defaults for the missing ones, and what transformers derives at construction
(``num_key_value_heads`` from the heads, the Qwen families' ``sliding_window`` off
unless used).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_COMMON: dict[str, Any] = {
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

_GEMMA: dict[str, Any] = {
    **_COMMON,
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

_QWEN_MOE: dict[str, Any] = {
    **_COMMON,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "use_sliding_window": False,
    "sliding_window": 4096,
    "norm_topk_prob": False,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "bos_token_id": None,
    "eos_token_id": None,
}

# Per architecture, what differs from _COMMON (transformers' config class defaults).
DEFAULTS: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {
        **_COMMON,
        "model_type": "llama",
        "intermediate_size": 11008,
        "max_position_embeddings": 2048,
    },
    "MistralForCausalLM": {
        **_COMMON,
        "model_type": "mistral",
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32,
        "sliding_window": 4096,
    },
    "Qwen2ForCausalLM": {
        **_COMMON,
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
    "Qwen3ForCausalLM": {
        **_COMMON,
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
    "GraniteForCausalLM": {
        **_COMMON,
        "model_type": "granite",
        "intermediate_size": 11008,
        "max_position_embeddings": 2048,
        "embedding_multiplier": 1.0,
        "residual_multiplier": 1.0,
        "attention_multiplier": 1.0,
        "logits_scaling": 1.0,
    },
    "Olmo2ForCausalLM": {
        **_COMMON,
        "model_type": "olmo2",
        "vocab_size": 50304,
        "intermediate_size": 11008,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "bos_token_id": None,
        "eos_token_id": 50279,
        "pad_token_id": 1,
    },
    "Phi3ForCausalLM": {
        **_COMMON,
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
    "Gemma2ForCausalLM": {
        **_GEMMA,
        "model_type": "gemma2",
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
        "final_logit_softcapping": 30.0,
        "attn_logit_softcapping": 50.0,
    },
    "Gemma3ForCausalLM": {
        **_GEMMA,
        "model_type": "gemma3_text",
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "final_logit_softcapping": None,
        "attn_logit_softcapping": None,
    },
    "MixtralForCausalLM": {
        **_COMMON,
        "model_type": "mixtral",
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    "Qwen2MoeForCausalLM": {
        **_QWEN_MOE,
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "max_window_layers": 28,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "qkv_bias": True,
    },
    "Qwen3MoeForCausalLM": {
        **_QWEN_MOE,
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "num_local_experts": 128,  # transformers 5 writes this name; checkpoints num_experts
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
    },
    "DeepseekV3ForCausalLM": {
        **_COMMON,
        "model_type": "deepseek_v3",
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_shared_experts": 1,
        "n_routed_experts": 256,
        "routed_scaling_factor": 2.5,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "qk_nope_head_dim": 128,
        "n_group": 8,
        "topk_group": 4,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "norm_topk_prob": True,
        "max_position_embeddings": 4096,
        "rope_interleave": True,
        "bos_token_id": 0,
        "eos_token_id": 1,
    },
}


# what a family's sliding_window reads as while use_sliding_window is false
_WINDOW_OFF: dict[str, Any] = {"Qwen2MoeForCausalLM": 0}


def read_hf_config(raw: dict[str, Any], architecture: str) -> SimpleNamespace:
    """config.json's object ``raw`` -> the namespace the engine reads, ``architecture``
    (one of :data:`DEFAULTS`) choosing the defaults."""
    if architecture not in DEFAULTS:
        raise ValueError(
            f"architecture must be one of {', '.join(sorted(DEFAULTS))}, got {architecture!r}"
        )
    if not isinstance(raw, dict):
        raise TypeError(f"raw must be config.json's object (a dict), got {type(raw).__name__}")
    values = {**DEFAULTS[architecture], **raw}
    if values.get("num_key_value_heads") is None:
        values["num_key_value_heads"] = values.get("num_attention_heads")
    if "dtype" not in values and "torch_dtype" in values:
        values["dtype"] = values["torch_dtype"]  # the older spelling
    if "use_sliding_window" in DEFAULTS[architecture] and not values.get("use_sliding_window"):
        values["sliding_window"] = _WINDOW_OFF.get(architecture)
    return SimpleNamespace(**values)


def load_hf_config(root: Path, supported: tuple[str, ...]) -> tuple[SimpleNamespace, str]:
    """A model directory's config.json -> (its namespace, the supported architecture it
    names); a ValueError that says what was expected for anything else."""
    if not root.exists():
        raise ValueError(f"model directory does not exist: {root}")
    if not root.is_dir():
        raise ValueError(f"model must be a directory, got a file: {root}")
    cfg_file = root / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"no config.json in the model directory {root}")
    try:
        raw = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not parse {cfg_file}: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{cfg_file} must hold a JSON object, got {type(raw).__name__}")
    archs = raw.get("architectures") or []
    arch = next((a for a in archs if a in supported), None)
    if arch is None:
        raise ValueError(
            f"unsupported architecture {archs!r} in {cfg_file}; supported: {', '.join(supported)}"
        )
    return read_hf_config(raw, arch), arch
