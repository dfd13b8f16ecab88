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

from tandem.core.models.architectures.common import activation, attention, llama_like
from tandem.core.models.fields import layer_types, number, optional_positive, positive_int
from tandem.core.models.rope_config import read_rope
from tandem.core.models.spec import ModelSpec


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
