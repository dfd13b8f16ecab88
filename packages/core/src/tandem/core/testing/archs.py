"""Tiny configs of the architectures past the Llama family, each set to hit its traps.

Windows are shorter than the test prompts, head sizes differ from hidden / heads, and
every scalar a family multiplies by is far from 1, so that a model that skips one of
them cannot match transformers by luck.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

DENSE_ARCHS: dict[str, tuple[str, dict[str, Any]]] = {
    "mistral_window": (
        "MistralConfig",
        {  # every layer slides over 8 keys
            "num_key_value_heads": 2,
            "sliding_window": 8,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
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
    "olmo2": (
        "Olmo2Config",
        {  # norms after each block only; q/k norms over the whole projection
            "num_key_value_heads": 1,
            "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
        },
    ),
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
}

MOE_ARCHS: dict[str, tuple[str, dict[str, Any]]] = {
    "mixtral": (
        "MixtralConfig",
        {  # top-2 of 4 experts, routers of experts 0 and 1 tied; a window of 12
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "intermediate_size": 64,
            "sliding_window": 12,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
        },
    ),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        {  # top-2 of 6, unnormalised; a sigmoid-gated shared expert; every second layer sparse
            "num_experts": 6,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 48,
            "decoder_sparse_step": 2,
            "norm_topk_prob": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        {  # top-3 of 8, normalised; layer 0 dense (mlp_only_layers); per-head q/k norms
            "num_experts": 8,
            "num_experts_per_tok": 3,
            "moe_intermediate_size": 24,
            "intermediate_size": 96,
            "norm_topk_prob": True,
            "mlp_only_layers": [0],
            "head_dim": 24,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
        },
    ),
}

# latent attention (DeepSeek): the KV cache keeps one latent row per token
LATENT_ARCHS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek_v3": (
        "DeepseekV3Config",
        {  # latent attention (q through its own latent, yarn scaling, interleaved rope);
            # layer 0 dense; top-3 of 8 experts in 4 groups, 2 kept; a shared expert
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "q_lora_rank": 48,
            "kv_lora_rank": 40,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8,
            "v_head_dim": 12,
            "n_routed_experts": 8,
            "num_experts_per_tok": 3,
            "n_group": 4,
            "topk_group": 2,
            "n_shared_experts": 1,
            "moe_intermediate_size": 24,
            "first_k_dense_replace": 1,
            "routed_scaling_factor": 2.5,
            "rope_interleave": True,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 128,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "beta_fast": 32,
                "beta_slow": 1,
            },
        },
    ),
    "deepseek_v3_plain": (
        "DeepseekV3Config",
        {  # the other branches: q straight from the hidden state, rope in halves, no
            # scaling; every layer sparse, one group, weights unnormalised; biases
            "num_attention_heads": 3,
            "num_key_value_heads": 3,
            "q_lora_rank": None,
            "kv_lora_rank": 20,
            "qk_nope_head_dim": 12,
            "qk_rope_head_dim": 8,
            "v_head_dim": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_group": 1,
            "topk_group": 1,
            "n_shared_experts": 2,
            "moe_intermediate_size": 16,
            "first_k_dense_replace": 0,
            "norm_topk_prob": False,
            "routed_scaling_factor": 1.5,
            "rope_interleave": False,
            "attention_bias": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
}


def _bias_router_scores(model: torch.nn.Module) -> None:
    """DeepSeek's routing correction starts at 0: give it values that change the choice."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("e_score_correction_bias"):
                param.normal_(0.0, 0.3)
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.3)


def _tie_first_routers(model: torch.nn.Module) -> None:
    """Experts 0 and 1 get the same router row: equal scores, whose order decides."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("gate.weight") and param.dim() == 2 and param.shape[0] > 1:
                param[1].copy_(param[0])


# changes made to an architecture's random weights after they are drawn
TWEAKS: dict[str, Callable[[torch.nn.Module], None]] = {
    "mixtral": _tie_first_routers,
    "deepseek_v3": _bias_router_scores,
    "deepseek_v3_plain": _bias_router_scores,
}
