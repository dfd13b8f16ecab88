"""DeepSeek-V3: multi-head latent attention, and routed plus shared experts with
group-limited sigmoid routing after ``first_k_dense_replace`` dense layers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tandem.core.models.architectures.common import llama_like, split_qkv_gate_up
from tandem.core.models.architectures.moe import expert_names
from tandem.core.models.fields import count, flag, number, optional_int, positive_int
from tandem.core.models.rope_config import read_rope, yarn_mscale
from tandem.core.models.spec import AttentionSpec, LatentSpec, ModelSpec, MoESpec
from tandem.core.models.weights import NameMap, Shard, fused


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
