"""DeepSeek-V3: multi-head latent attention, and routed plus shared experts with
group-limited sigmoid routing after ``first_k_dense_replace`` dense layers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tandem.core.models.architectures.common import HF_COMMON, llama_like, split_qkv_gate_up
from tandem.core.models.architectures.entry import Architecture
from tandem.core.models.architectures.gguf_names import (
    LAYER,
    GGUFNames,
    Joined,
    Metadata,
    arch_int,
    arch_value,
    base_config,
    f32,
)
from tandem.core.models.architectures.moe import ROUTED, expert_names
from tandem.core.models.weights import NameMap, Shard, fused
from tandem.core.spec.fields import count, flag, number, optional_int, positive_int
from tandem.core.spec.model import AttentionSpec, LatentSpec, ModelSpec, MoESpec
from tandem.core.spec.rope import read_rope, yarn_mscale


def _latent_attention(cfg: Any, max_model_len: int | None) -> AttentionSpec:
    lat = LatentSpec(
        q_lora_rank=optional_int(cfg, "q_lora_rank"),
        kv_lora_rank=positive_int(cfg, "kv_lora_rank"),
        qk_nope_head_dim=positive_int(cfg, "qk_nope_head_dim"),
        qk_rope_head_dim=positive_int(cfg, "qk_rope_head_dim"),
        v_head_dim=positive_int(cfg, "v_head_dim"),
        interleaved=flag(cfg, "rope_interleave", True),
    )
    row = lat.kv_lora_rank + lat.qk_rope_head_dim
    if row % 2:
        raise ValueError(
            "kv_lora_rank + qk_rope_head_dim must be even (the cached latent row is split "
            f"over the K and V halves of the cache), got {row}"
        )
    scale = (lat.qk_nope_head_dim + lat.qk_rope_head_dim) ** -0.5
    rope = read_rope(cfg, max_model_len=max_model_len)
    if rope.type != "default" and rope.mscale_all_dim:  # YaRN's correction of the scores
        scale *= yarn_mscale(rope.factor, rope.mscale_all_dim) ** 2
    bias = flag(cfg, "attention_bias")
    heads = positive_int(cfg, "num_attention_heads")
    return AttentionSpec(heads, 1, row // 2, scale, qkv_bias=bias, o_bias=bias, latent=lat)


def deepseek_v3(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    spec = llama_like(cfg, arch, max_model_len, _latent_attention(cfg, max_model_len))
    experts = positive_int(cfg, "n_routed_experts")
    n_group = optional_int(cfg, "n_group", 1) or 1
    if experts % n_group:
        raise ValueError(f"config.n_group must divide n_routed_experts ({experts}), got {n_group}")
    topk_group = optional_int(cfg, "topk_group", 1) or 1
    if topk_group > n_group:
        raise ValueError(f"config.topk_group must be <= n_group ({n_group}), got {topk_group}")
    inter = positive_int(cfg, "moe_intermediate_size")
    moe = MoESpec(
        num_experts=experts,
        top_k=positive_int(cfg, "num_experts_per_tok"),
        intermediate_size=inter,
        norm_topk_prob=flag(cfg, "norm_topk_prob", True),
        shared_intermediate_size=inter * count(cfg, "n_shared_experts"),
        scoring="sigmoid",
        n_group=n_group,
        topk_group=topk_group,
        routed_scaling=number(cfg, "routed_scaling_factor", 1.0),
        score_bias=True,
    )
    dense = count(cfg, "first_k_dense_replace")
    sparse = replace(spec.mlp, moe=moe)
    layers = tuple(
        replace(layer, mlp=sparse) if i >= dense else layer for i, layer in enumerate(spec.layers)
    )
    return replace(spec, layers=layers)


def names(spec: ModelSpec) -> NameMap:
    """Dense MLPs split as Llama's, experts stacked, ``shared_experts`` fused."""
    out = {
        **split_qkv_gate_up(spec),
        **expert_names(spec, "mlp", ("gate_proj", "up_proj", "down_proj")),
    }
    moe = next((layer.mlp.moe for layer in spec.layers if layer.mlp and layer.mlp.moe), None)
    if moe is not None and moe.shared_intermediate_size:
        rows = moe.shared_intermediate_size
        parts = [("mlp.shared_experts.gate_proj", rows), ("mlp.shared_experts.up_proj", rows)]
        out.update(fused(parts, "mlp.shared_expert.gate_up_proj"))
        out["mlp.shared_experts.down_proj"] = Shard("mlp.shared_expert.down_proj")
    return out


# -- GGUF ---------------------------------------------------------------------------------
# llama.cpp reads latent attention as one shared KV head (head_count_kv 1, key_length
# kv_lora + rope); the head sizes themselves are the *_mla keys (files older than them
# have the sizes in key_length/value_length and an unsplit attn_kv_b). Rope always runs in
# interleaved pairs, as DeepSeek-V3's checkpoints have it. YaRN's correction of the scores
# is written as 0.1 * mscale_all_dim and nothing rescales the rotary values.

_SIGMOID = 2  # llama.cpp's expert_gating_func values: 1 softmax, 2 sigmoid


def _deepseek2_gguf(meta: Metadata) -> dict[str, Any]:
    config = base_config(meta, "DeepseekV3ForCausalLM", "deepseek_v3")
    names = meta.tensor_names
    gating = arch_value(meta, "expert_gating_func")
    if gating != _SIGMOID:
        raise ValueError(
            f"GGUF metadata {meta.architecture}.expert_gating_func is {gating!r} (llama.cpp "
            "reads 1 or none as softmax routing, DeepSeek-V2's); Tandem runs DeepSeek-V3's "
            f"sigmoid routing only ({_SIGMOID})"
        )
    dense = arch_int(meta, "leading_dense_block_count", 0)
    if f"blk.{dense}.exp_probs_b.bias" not in names:
        raise ValueError(
            f"GGUF tensor blk.{dense}.exp_probs_b.bias (the routing score bias) is missing; "
            "DeepSeek-V3's routing needs it"
        )
    rope = arch_int(meta, "rope.dimension_count")
    mla = arch_value(meta, "attention.key_length_mla") is not None
    qk = arch_int(meta, "attention.key_length_mla" if mla else "attention.key_length")
    v = arch_int(meta, "attention.value_length_mla" if mla else "attention.value_length")
    q_lora = "blk.0.attn_q_a.weight" in names
    config.update(
        num_key_value_heads=config["num_attention_heads"],
        head_dim=rope,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=qk - rope,
        qk_head_dim=qk,
        v_head_dim=v,
        kv_lora_rank=arch_int(meta, "attention.kv_lora_rank"),
        q_lora_rank=arch_int(meta, "attention.q_lora_rank") if q_lora else None,
        first_k_dense_replace=dense,
        n_routed_experts=arch_int(meta, "expert_count"),
        num_experts_per_tok=arch_int(meta, "expert_used_count"),
        n_shared_experts=arch_int(meta, "expert_shared_count", 0),
        moe_intermediate_size=arch_int(meta, "expert_feed_forward_length"),
        n_group=max(1, arch_int(meta, "expert_group_count", 1)),
        topk_group=max(1, arch_int(meta, "expert_group_used_count", 1)),
        routed_scaling_factor=f32(arch_value(meta, "expert_weights_scale", 1.0)),
        norm_topk_prob=bool(arch_value(meta, "expert_weights_norm", False)),
        scoring_func="sigmoid",
        rope_interleave=True,
        attention_bias="blk.0.attn_kv_a_mqa.bias" in names,
    )
    params = config["rope_parameters"]
    if params["rope_type"] == "yarn":
        log_mul = arch_value(meta, "rope.scaling.yarn_log_multiplier")
        if log_mul:
            mscale = f32(f32(log_mul) / 0.1)
            params.update(mscale=mscale, mscale_all_dim=mscale)
        else:
            params["attention_factor"] = 1.0
    return config


def _kv_b(values: list[Any], config: Mapping[str, Any]) -> Any:
    """``kv_b_proj`` [heads * (nope + v), kv_lora] from the converter's per-head halves:
    ``attn_k_b`` [heads, kv_lora, nope] (each head's key rows, transposed) and
    ``attn_v_b`` [heads, v, kv_lora]; either may come untransposed or flattened."""
    import numpy as np

    heads, rank = config["num_attention_heads"], config["kv_lora_rank"]
    k, v = (a.reshape(heads, -1, a.shape[-1]) for a in values)
    if k.shape[1:] == (rank, config["qk_nope_head_dim"]):  # as written (square: taken so)
        k = k.transpose(0, 2, 1)
    if v.shape[1:] == (rank, config["v_head_dim"]) and rank != config["v_head_dim"]:
        v = v.transpose(0, 2, 1)
    return np.concatenate([k, v], axis=1).reshape(-1, rank)


_DEEPSEEK2_LAYER = {
    **LAYER,
    **ROUTED,
    "attn_q_a": "self_attn.q_a_proj",
    "attn_q_a_norm": "self_attn.q_a_layernorm",
    "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa",
    "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_kv_b": "self_attn.kv_b_proj",
    "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
    "ffn_up_shexp": "mlp.shared_experts.up_proj",
    "ffn_down_shexp": "mlp.shared_experts.down_proj",
    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
}

GGUF = (
    GGUFNames(
        "deepseek2",
        _deepseek2_gguf,
        _DEEPSEEK2_LAYER,
        joined={
            "self_attn.kv_b_proj.weight": Joined(("attn_k_b.weight", "attn_v_b.weight"), _kv_b)
        },
    ),
)

# each architecture of this family: its spec, names, transformers' config defaults and
# the tiny test configs that carry its traps (tandem.core.testing)
ARCHITECTURES = (
    Architecture(
        "DeepseekV3ForCausalLM",
        deepseek_v3,
        names=names,
        extra_layers=True,
        hf_defaults={
            **HF_COMMON,
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
        tests={
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
                    # scaling; every layer sparse, one group, weights unnormalised; biases;
                    # 6 heads (3 a rank at 2 ranks)
                    "num_attention_heads": 6,
                    "num_key_value_heads": 6,
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
        },
    ),
)
