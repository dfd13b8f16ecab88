"""Phi-3 and Phi-4-mini: q/k/v and gate/up fused in the checkpoint, partial rotary, longrope."""

from __future__ import annotations

from typing import Any

from tandem.core.models.architectures.common import llama_like
from tandem.core.models.spec import ModelSpec
from tandem.core.models.weights import NameMap

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
