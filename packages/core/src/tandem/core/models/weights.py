"""Copying Hugging Face-named tensors into a model whose projections are fused."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tandem.core.models.spec import ModelSpec

# Tensors some checkpoints carry that are derived state, not weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_LISTED = 8


@dataclass(frozen=True, slots=True)
class Shard:
    """A checkpoint tensor that fills rows ``[offset, offset + size)`` of a fused parameter."""

    target: str
    offset: int
    size: int


def fused_shards(spec: ModelSpec) -> dict[str, Shard]:
    """Checkpoint module name (inside a layer) -> where it lands in the fused module."""
    q = spec.num_heads * spec.head_dim
    kv = spec.num_kv_heads * spec.head_dim
    inter = spec.intermediate_size
    return {
        "self_attn.q_proj": Shard("self_attn.qkv_proj", 0, q),
        "self_attn.k_proj": Shard("self_attn.qkv_proj", q, kv),
        "self_attn.v_proj": Shard("self_attn.qkv_proj", q + kv, kv),
        "mlp.gate_proj": Shard("mlp.gate_up_proj", 0, inter),
        "mlp.up_proj": Shard("mlp.gate_up_proj", inter, inter),
    }


def expected_names(
    model: nn.Module, shards: Mapping[str, Shard]
) -> dict[str, tuple[nn.Parameter, Shard | None]]:
    """Every checkpoint name the model needs -> (parameter, shard or None for a whole copy)."""
    by_target: dict[str, list[tuple[str, Shard]]] = {}
    for source, shard in shards.items():
        by_target.setdefault(shard.target, []).append((source, shard))
    names: dict[str, tuple[nn.Parameter, Shard | None]] = {}
    for name, param in model.named_parameters():
        module, _, leaf = name.rpartition(".")
        for target, sources in by_target.items():
            if module == target or module.endswith("." + target):
                prefix = module[: len(module) - len(target)]
                for source, shard in sources:
                    names[f"{prefix}{source}.{leaf}"] = (param, shard)
                break
        else:
            names[name] = (param, None)
    return names


def load_named(
    model: nn.Module,
    weights: Iterable[tuple[str, Tensor]],
    shards: Mapping[str, Shard],
    skip: Iterable[str] = (),
) -> None:
    """Load every expected tensor exactly once; raise on missing, unexpected or misshaped."""
    expected = expected_names(model, shards)
    skipped = set(skip)
    loaded: set[str] = set()
    unexpected: list[str] = []
    with torch.no_grad():
        for name, tensor in weights:
            entry = expected.get(name)
            if entry is None:
                if name not in skipped and not name.endswith(_IGNORED_SUFFIXES):
                    unexpected.append(name)
                continue
            param, shard = entry
            dest = param if shard is None else param[shard.offset : shard.offset + shard.size]
            if tuple(tensor.shape) != tuple(dest.shape):
                raise ValueError(
                    f"weight {name!r} has shape {list(tensor.shape)} but the model expects "
                    f"{list(dest.shape)}"
                )
            dest.copy_(tensor)
            loaded.add(name)
    missing = sorted(set(expected) - loaded)
    problems = []
    if missing:
        problems.append(f"missing weights ({len(missing)}): {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected weights ({len(unexpected)}): {_listing(sorted(unexpected))}")
    if problems:
        raise ValueError("checkpoint does not match the model: " + "; ".join(problems))


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f", ... and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
