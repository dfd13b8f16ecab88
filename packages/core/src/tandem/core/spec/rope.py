"""Rope settings read from a config, in any of the spellings checkpoints use.

transformers 5 writes ``rope_parameters`` (a dict, or one dict per layer type for models
whose local and global layers rotate differently); older checkpoints carry
``rope_theta``/``rope_scaling`` on the config itself, and Gemma 3 ``rope_local_base_freq``.
Reading them in one place keeps the spellings out of the model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tandem.core.spec.fields import positive_int

ROPE_TYPES = ("default", "linear", "llama3", "longrope", "yarn")
LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass(frozen=True, slots=True)
class RopeSpec:
    theta: float
    type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192
    partial: float = 1.0  # the leading fraction of each head that rotates (Phi-3: 0.75)
    ext_factors: tuple[float, ...] = ()  # longrope: per-frequency divisors (short or long)
    attention_factor: float = 1.0  # cos and sin are multiplied by it (longrope, yarn)
    beta_fast: float = 32.0  # yarn: the ramp between interpolated and kept frequencies
    beta_slow: float = 1.0
    truncate: bool = True
    mscale_all_dim: float = 0.0  # yarn (DeepSeek): the softmax scale's own correction

    def rotary_dim(self, head_dim: int) -> int:
        return int(head_dim * self.partial)


def rope_params(hf_config: Any, layer_type: str | None = None) -> dict[str, Any]:
    """The rope dict of the config (of ``layer_type`` where the config nests them)."""
    params = getattr(hf_config, "rope_parameters", None)
    if params is None:
        params = getattr(hf_config, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        raise ValueError(f"config.rope_parameters must be a dict, got {params!r}")
    if any(isinstance(params.get(t), dict) for t in LAYER_TYPES):
        nested = params.get(layer_type or "full_attention")
        return dict(nested or {})
    return dict(params)


def read_rope(
    hf_config: Any,
    layer_type: str | None = None,
    default_theta: float = 10000.0,
    max_model_len: int | None = None,
) -> RopeSpec:
    """Rope settings from ``rope_parameters`` (transformers 5) or the legacy attributes.

    ``max_model_len`` picks longrope's factors: the long ones when sequences may grow
    past the pretraining length, the short ones otherwise (transformers switches on each
    call's length, which a paged cache cannot: keys already cached keep their rotation).
    """
    params = rope_params(hf_config, layer_type)
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    theta = default_theta if theta is None else float(theta)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type in ("su", "yarn") and "long_factor" in params:  # Phi-3's older names
        rope_type = "longrope"
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type must be one of {', '.join(ROPE_TYPES)}, got {rope_type!r}")
    partial = params.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", None))
    partial = 1.0 if partial is None else float(partial)
    if not 0.0 < partial <= 1.0:
        raise ValueError(f"partial_rotary_factor must be in (0, 1], got {partial!r}")
    base = {"theta": theta, "partial": partial}
    if rope_type == "default":
        return RopeSpec(**base)
    original = getattr(hf_config, "original_max_position_embeddings", None)
    if original is None:
        original = params.get("original_max_position_embeddings")
    if original is None:
        original = positive_int(hf_config, "max_position_embeddings")
    if rope_type == "longrope":
        return _longrope(hf_config, params, base, int(original), max_model_len)
    if rope_type == "yarn":
        return _yarn(hf_config, params, base, int(original))
    factor = float(params.get("factor", 1.0))
    if factor <= 0:
        raise ValueError(f"rope factor must be > 0, got {factor}")
    if rope_type == "linear":
        return RopeSpec(**base, type="linear", factor=factor)
    low = float(params.get("low_freq_factor", 1.0))
    high = float(params.get("high_freq_factor", 4.0))
    if high <= low:
        raise ValueError(
            f"llama3 rope needs high_freq_factor > low_freq_factor, got {high} <= {low}"
        )
    return RopeSpec(
        **base,
        type="llama3",
        factor=factor,
        low_freq_factor=low,
        high_freq_factor=high,
        original_max_position=int(original),
    )


def _longrope(
    hf_config: Any,
    params: dict[str, Any],
    base: dict[str, Any],
    original: int,
    max_model_len: int | None,
) -> RopeSpec:
    max_pos = positive_int(hf_config, "max_position_embeddings")
    limit = max_pos if max_model_len is None else max_model_len
    key = "long_factor" if limit > original else "short_factor"
    factors = params.get(key)
    if not isinstance(factors, (list, tuple)) or not factors:
        raise ValueError(
            f"longrope needs rope_parameters.{key} (a list of numbers), got {factors!r}"
        )
    factor = params.get("factor")
    factor = max_pos / original if factor is None else float(factor)
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return RopeSpec(
        **base,
        type="longrope",
        factor=factor,
        original_max_position=original,
        ext_factors=tuple(float(f) for f in factors),
        attention_factor=float(attention),
    )


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction for a context ``factor`` times the original."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn(hf_config: Any, params: dict[str, Any], base: dict[str, Any], original: int) -> RopeSpec:
    factor = params.get("factor")
    if factor is None:
        factor = positive_int(hf_config, "max_position_embeddings") / original
    factor = float(factor)
    if factor <= 0:
        raise ValueError(f"rope factor must be > 0, got {factor}")
    mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
    attention = params.get("attention_factor")
    if attention is None:
        if mscale and mscale_all:
            attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)
        else:
            attention = yarn_mscale(factor)
    return RopeSpec(
        **base,
        type="yarn",
        factor=factor,
        original_max_position=original,
        attention_factor=float(attention),
        beta_fast=float(params.get("beta_fast") or 32),
        beta_slow=float(params.get("beta_slow") or 1),
        truncate=bool(params.get("truncate", True)),
        mscale_all_dim=float(mscale_all or 0.0),
    )
