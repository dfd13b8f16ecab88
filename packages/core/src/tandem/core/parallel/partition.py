"""Which slice of a split dimension each rank holds, and which models can be split.

All ranges are ``(start, stop)`` in the full (unsplit) dimension. Heads and MLP columns
split evenly (the sizes must divide); KV heads split too, or are replicated when there
are fewer than ranks (each rank keeps the one its query heads read: latent attention's
one cached latent is on every rank); the vocabulary is
padded to a multiple of the ranks; experts go in contiguous runs, as even as they come,
and every rank holds one at least (no more ranks than experts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tandem.core.spec.model import ModelSpec

Range = tuple[int, int]


def even_range(n: int, parts: int, index: int) -> Range:
    """Rank ``index``'s run of ``n`` items split into ``parts`` equal runs (n % parts == 0)."""
    size = n // parts
    return index * size, (index + 1) * size


def kv_head_range(num_kv_heads: int, parts: int, index: int) -> Range:
    """The KV heads rank ``index`` holds: its share, or (fewer heads than ranks) the one
    head its query heads attend with, replicated on ``parts // num_kv_heads`` ranks."""
    if num_kv_heads >= parts:
        return even_range(num_kv_heads, parts, index)
    head = index * num_kv_heads // parts
    return head, head + 1


def padded_range(n: int, parts: int, index: int) -> tuple[Range, int]:
    """Rank ``index``'s rows of a dimension padded to a multiple of ``parts``: the rows it
    holds of the ``n`` real ones, and its padded row count (the same on every rank)."""
    local = -(-n // parts)
    start = min(index * local, n)
    return (start, min(start + local, n)), local


def spread_range(n: int, parts: int, index: int) -> Range:
    """A contiguous run of ``n`` items (experts) for each of ``parts``, sizes differing by
    one at most; a run may be empty when there are more parts than items."""
    return index * n // parts, (index + 1) * n // parts


def check_tensor_parallel(spec: ModelSpec, size: int) -> None:
    """ValueError naming the config field that cannot be split over ``size`` ranks."""
    if size == 1:
        return
    attn = spec.attention
    if attn.qk_norm == "proj":
        raise ValueError(
            f"tensor_parallel_size={size}: {spec.architecture} normalises q and k over the "
            "whole projection, which is not split over ranks; use tensor_parallel_size=1"
        )
    _divides(size, "num_attention_heads", attn.num_heads)
    kv = attn.num_kv_heads
    if kv >= size:
        _divides(size, "num_key_value_heads", kv)
    elif size % kv:
        raise ValueError(
            f"tensor_parallel_size={size} must be a multiple of num_key_value_heads ({kv}) "
            "when there are fewer KV heads than ranks"
        )
    for i in range(spec.num_layers):
        mlp = spec.layer_mlp(i)
        if mlp.moe is None:
            _divides(size, "intermediate_size", mlp.intermediate_size)
            continue
        experts = mlp.moe.num_experts
        if experts < size:  # a rank would hold no expert: its MoE layers cannot run
            raise ValueError(
                f"tensor_parallel_size={size} must be at most num_experts ({experts}): each "
                f"rank holds a run of whole experts, at least one; choose a size <= {experts}"
            )
        if mlp.moe.shared_intermediate_size:
            _divides(size, "shared_expert_intermediate_size", mlp.moe.shared_intermediate_size)


def _divides(size: int, name: str, value: int) -> None:
    if value % size:
        raise ValueError(
            f"tensor_parallel_size={size} must divide {name} ({value}); choose a divisor of {value}"
        )
