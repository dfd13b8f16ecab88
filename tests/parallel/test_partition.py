"""How dimensions split over ranks, which models split, and where a checkpoint tensor's
part lands in a rank's shard."""

from __future__ import annotations

import pytest
import torch

from tandem.core.models.architectures import build_spec
from tandem.core.parallel.layout import copies, owned_by_first, split
from tandem.core.parallel.partition import (
    check_tensor_parallel,
    even_range,
    kv_head_range,
    padded_range,
    spread_range,
)
from tandem.core.spec.model import ModelSpec
from tandem.core.testing.models import ARCHS, MODEL_SIZES


def _spec(arch: str, **overrides: object) -> ModelSpec:
    import transformers

    cls_name, fields = ARCHS[arch]
    config = getattr(transformers, cls_name)(**{**MODEL_SIZES["tiny"], **fields, **overrides})
    return build_spec(config, cls_name.replace("Config", "ForCausalLM"))


def test_ranges_cover_the_dimension_once() -> None:
    assert [even_range(8, 4, r) for r in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [spread_range(6, 4, r) for r in range(4)] == [(0, 1), (1, 3), (3, 4), (4, 6)]
    assert [spread_range(2, 4, r) for r in range(4)] == [(0, 0), (0, 1), (1, 1), (1, 2)]
    assert [padded_range(5, 4, r) for r in range(4)] == [
        ((0, 2), 2),
        ((2, 4), 2),
        ((4, 5), 2),
        ((5, 5), 2),
    ]


@pytest.mark.parametrize(
    ("kv", "ranks", "want"),
    [
        (2, 2, [(0, 1), (1, 2)]),
        (1, 4, [(0, 1)] * 4),  # one KV head: every rank holds it
        (2, 4, [(0, 1), (0, 1), (1, 2), (1, 2)]),  # each pair of ranks shares its head
        (8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    ],
)
def test_kv_heads_split_or_replicate(kv: int, ranks: int, want: list[tuple[int, int]]) -> None:
    assert [kv_head_range(kv, ranks, r) for r in range(ranks)] == want


def test_models_that_do_not_split_name_the_field() -> None:
    check_tensor_parallel(_spec("llama"), 4)  # 4 heads, 2 KV heads (replicated at 4)
    with pytest.raises(ValueError, match=r"must divide num_attention_heads \(4\)"):
        check_tensor_parallel(_spec("llama"), 8)
    with pytest.raises(ValueError, match=r"multiple of num_key_value_heads \(2\)"):
        check_tensor_parallel(_spec("qwen3"), 3)
    with pytest.raises(ValueError, match=r"must divide intermediate_size \(130\)"):
        check_tensor_parallel(_spec("llama", intermediate_size=130), 4)
    with pytest.raises(ValueError, match="normalises q and k over the whole projection"):
        check_tensor_parallel(_spec("olmo2"), 2)
    check_tensor_parallel(_spec("deepseek_v3"), 2)  # latent attention: 2 heads a rank
    with pytest.raises(ValueError, match=r"must divide num_attention_heads \(4\)"):
        check_tensor_parallel(_spec("deepseek_v3"), 3)


def test_a_moe_model_with_fewer_experts_than_ranks_is_refused() -> None:
    """Each rank holds a run of whole experts: with fewer experts than ranks one would
    hold none (and fail: a GGUF file's at load, a float one's at its first decode)."""
    one = _spec("mixtral", num_local_experts=1, num_experts_per_tok=1)
    with pytest.raises(ValueError) as caught:
        check_tensor_parallel(one, 2)
    assert str(caught.value) == (
        "tensor_parallel_size=2 must be at most num_experts (1): each rank holds a run of "
        "whole experts, at least one; choose a size <= 1"
    )
    check_tensor_parallel(_spec("mixtral", num_local_experts=2, num_experts_per_tok=1), 2)
    with pytest.raises(ValueError, match=r"must be at most num_experts \(6\)"):
        check_tensor_parallel(_spec("qwen2_moe", num_attention_heads=8), 8)


def _shard(layout_full: tuple[int, ...], layout, box, tensor: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(layout.local_shape())
    for src, dst in copies(layout, box):
        out[dst] = tensor[src]
    return out


def test_a_fused_projection_takes_its_runs_of_each_part() -> None:
    # full rows: q 0..3, k 4..5, v 6..7; this rank holds q 2..3, k 5, v 7
    full = torch.arange(16.0).view(8, 2)
    layout = split((8, 2), 0, (2, 4), (5, 6), (7, 8))
    assert layout.local_shape() == (4, 2)
    whole = _shard((8, 2), layout, ((0, 8), (0, 2)), full)  # a checkpoint fused as ours
    assert torch.equal(whole, full[[2, 3, 5, 7]])
    k_only = _shard((8, 2), layout, ((4, 6), (0, 2)), full[4:6])  # a separate k_proj
    assert torch.equal(k_only[2], full[5]) and not k_only[[0, 1, 3]].any()


def test_columns_experts_and_a_bias_held_by_rank_zero() -> None:
    full = torch.arange(12.0).view(3, 4)
    cols = split((3, 4), 1, (2, 4))
    assert torch.equal(_shard((3, 4), cols, ((0, 3), (0, 4)), full), full[:, 2:])
    experts = split((4, 2, 3), 0, (1, 3))  # experts 1 and 2 of 4
    assert copies(experts, ((0, 1), (0, 2), (0, 3))) == []  # expert 0 is another rank's
    [(src, dst)] = copies(experts, ((2, 3), (0, 2), (0, 3)))
    assert dst[0] == slice(1, 2) and src[0] == slice(0, 1)
    assert copies(owned_by_first((4,), 1), ((0, 4),)) == []
    assert len(copies(owned_by_first((4,), 0), ((0, 4),))) == 1
