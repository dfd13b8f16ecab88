"""Mixtures of experts: Mixtral, Qwen2-MoE (sigmoid-gated shared expert), Qwen3-MoE."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tandem.core.models.architectures.common import (
    HF_COMMON,
    attention,
    llama_like,
    split_qkv_gate_up,
)
from tandem.core.models.architectures.entry import Architecture
from tandem.core.models.architectures.gguf_names import (
    LAYER,
    GGUFNames,
    Metadata,
    arch_int,
    base_config,
)
from tandem.core.models.weights import NameMap, Shard, fused
from tandem.core.spec.fields import count, flag, optional_int, positive_int
from tandem.core.spec.model import MLPSpec, ModelSpec, MoESpec


def _experts(cfg: Any) -> int:
    count = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    if not isinstance(count, int) or count <= 0:
        raise ValueError(f"config.num_experts (or num_local_experts) must be > 0, got {count!r}")
    return count


def _moe_layers(spec: ModelSpec, moe: MLPSpec, sparse: list[bool]) -> ModelSpec:
    layers = tuple(
        replace(layer, mlp=moe) if is_sparse else layer
        for layer, is_sparse in zip(spec.layers, sparse)
    )
    return replace(spec, layers=layers)


def _top_k(cfg: Any, experts: int) -> int:
    k = positive_int(cfg, "num_experts_per_tok")
    if k > experts:
        raise ValueError(f"config.num_experts_per_tok must be <= num_experts ({experts}), got {k}")
    return k


def mixtral(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """Every layer routes to top-k of ``num_local_experts``, weights renormalised."""
    spec = llama_like(cfg, arch, max_model_len)
    experts = _experts(cfg)
    moe = MoESpec(experts, _top_k(cfg, experts), spec.mlp.intermediate_size, True)
    return _moe_layers(spec, replace(spec.mlp, moe=moe), [True] * spec.num_layers)


def _qwen2_moe_sliding(cfg: Any) -> Any:
    """Qwen2-MoE's rule where ``layer_types`` is left out: every other layer below
    ``max_window_layers`` (not Qwen2's "from max_window_layers on")."""
    below = count(cfg, "max_window_layers", 28)
    return lambda i: bool((i + 1) % 2) and i < below


def _qwen_moe(
    cfg: Any, arch: str, max_model_len: int | None, sliding: Any, **attn: Any
) -> ModelSpec:
    spec = llama_like(cfg, arch, max_model_len, attention(cfg, **attn), sliding)
    experts = _experts(cfg)
    shared = optional_int(cfg, "shared_expert_intermediate_size") or 0
    moe = MoESpec(
        num_experts=experts,
        top_k=_top_k(cfg, experts),
        intermediate_size=positive_int(cfg, "moe_intermediate_size"),
        norm_topk_prob=flag(cfg, "norm_topk_prob"),
        shared_intermediate_size=shared,
        shared_gate=bool(shared),
    )
    dense_only = set(getattr(cfg, "mlp_only_layers", None) or [])
    step = optional_int(cfg, "decoder_sparse_step", 1) or 1
    sparse = [i not in dense_only and (i + 1) % step == 0 for i in range(spec.num_layers)]
    return _moe_layers(spec, replace(spec.mlp, moe=moe), sparse)


def qwen2_moe(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """q/k/v biases from ``qkv_bias``; a shared expert scaled by sigmoid(x . w)."""
    bias = flag(cfg, "qkv_bias", True)
    return _qwen_moe(cfg, arch, max_model_len, _qwen2_moe_sliding(cfg), qkv_bias=bias, o_bias=False)


def qwen3_moe(cfg: Any, arch: str, max_model_len: int | None) -> ModelSpec:
    """Per-head q/k norms; dense MLPs on the layers of ``mlp_only_layers``."""
    return _qwen_moe(cfg, arch, max_model_len, None, qk_norm="head")


def _moe_spec(spec: ModelSpec) -> MoESpec | None:
    return next((layer.mlp.moe for layer in spec.layers if layer.mlp and layer.mlp.moe), None)


def expert_names(spec: ModelSpec, prefix: str, parts: tuple[str, str, str]) -> NameMap:
    """Each expert's gate, up and down checkpoint modules (``parts``, under ``prefix``)
    into the stacked ``mlp.experts`` weights."""
    moe = _moe_spec(spec)
    if moe is None:
        return {}
    inter = moe.intermediate_size
    gate, up, down = parts
    out: dict[str, Shard] = {}
    for e in range(moe.num_experts):
        base = f"{prefix}.experts.{e}"
        out.update(
            fused([(f"{base}.{gate}", inter), (f"{base}.{up}", inter)], "mlp.experts.gate_up", e)
        )
        out[f"{base}.{down}"] = Shard("mlp.experts.down", expert=e)
    return out


def mixtral_names(spec: ModelSpec) -> NameMap:
    """``block_sparse_moe.experts.{e}.w1/w3/w2`` (gate, up, down) and its router."""
    return {
        **split_qkv_gate_up(spec),
        **expert_names(spec, "block_sparse_moe", ("w1", "w3", "w2")),
        "block_sparse_moe.gate": Shard("mlp.gate"),
    }


def qwen_moe_names(spec: ModelSpec) -> NameMap:
    moe = _moe_spec(spec)
    names = {
        **split_qkv_gate_up(spec),
        **expert_names(spec, "mlp", ("gate_proj", "up_proj", "down_proj")),
    }
    if moe is not None and moe.shared_intermediate_size:
        rows = moe.shared_intermediate_size
        parts = [("mlp.shared_expert.gate_proj", rows), ("mlp.shared_expert.up_proj", rows)]
        names.update(fused(parts, "mlp.shared_expert.gate_up_proj"))
    return names


# -- GGUF ---------------------------------------------------------------------------------
# llama.cpp runs every Qwen-MoE layer sparse, keeps no window, and writes no
# norm_topk_prob: Qwen2-MoE's chosen weights stay as they are, Qwen3-MoE's are
# renormalised. A missing expert size falls back to llama.cpp's own default.


def _qwen_moe_gguf(meta: Metadata, architecture: str, model_type: str) -> dict[str, Any]:
    config = base_config(meta, architecture, model_type)
    top_k = arch_int(meta, "expert_used_count")
    config.update(
        num_experts=arch_int(meta, "expert_count"),
        num_experts_per_tok=top_k,
        moe_intermediate_size=arch_int(
            meta, "expert_feed_forward_length", config["intermediate_size"] // top_k
        ),
        decoder_sparse_step=1,
        mlp_only_layers=[],
        use_sliding_window=False,
    )
    return config


def _qwen2moe_gguf(meta: Metadata) -> dict[str, Any]:
    config = _qwen_moe_gguf(meta, "Qwen2MoeForCausalLM", "qwen2_moe")
    shared = arch_int(meta, "expert_shared_feed_forward_length", config["intermediate_size"])
    config.update(
        shared_expert_intermediate_size=shared,
        norm_topk_prob=False,
        qkv_bias="blk.0.attn_q.bias" in meta.tensor_names,
    )
    return config


def _qwen3moe_gguf(meta: Metadata) -> dict[str, Any]:
    config = _qwen_moe_gguf(meta, "Qwen3MoeForCausalLM", "qwen3_moe")
    config.update(norm_topk_prob=True, attention_bias="blk.0.attn_q.bias" in meta.tensor_names)
    return config


ROUTED = {
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.experts.{e}.gate_proj",
    "ffn_up_exps": "mlp.experts.{e}.up_proj",
    "ffn_down_exps": "mlp.experts.{e}.down_proj",
}
_QWEN2MOE_LAYER = {
    **LAYER,
    **ROUTED,
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}

GGUF = (
    # the shared expert's gate [1, hidden]: a vector once llama.cpp's quantizer wrote it
    GGUFNames("qwen2moe", _qwen2moe_gguf, _QWEN2MOE_LAYER, one_row=("ffn_gate_inp_shexp",)),
    GGUFNames("qwen3moe", _qwen3moe_gguf, {**LAYER, **ROUTED}),
)


_QWEN_MOE: dict[str, Any] = {
    **HF_COMMON,
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


# each architecture of this family: its spec, names, transformers' config defaults and
# the tiny test configs that carry its traps (tandem.core.testing)
ARCHITECTURES = (
    Architecture(
        "MixtralForCausalLM",
        mixtral,
        names=mixtral_names,
        hf_defaults={
            **HF_COMMON,
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
        tests={
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
        },
    ),
    Architecture(
        "Qwen2MoeForCausalLM",
        qwen2_moe,
        names=qwen_moe_names,
        hf_defaults={
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
        window_off=0,
        tests={
            "qwen2_moe": (
                "Qwen2MoeConfig",
                {  # top-2 of 6, unnormalised; a sigmoid-gated shared expert; every 2nd layer sparse
                    "num_experts": 6,
                    "num_experts_per_tok": 2,
                    "moe_intermediate_size": 32,
                    "shared_expert_intermediate_size": 48,
                    "decoder_sparse_step": 2,
                    "norm_topk_prob": False,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
                },
            ),
        },
    ),
    Architecture(
        "Qwen3MoeForCausalLM",
        qwen3_moe,
        names=qwen_moe_names,
        hf_defaults={
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
        tests={
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
        },
    ),
)
