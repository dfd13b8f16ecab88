"""Latent attention models (DeepSeek-V3): the KV cache keeps the latent row and nothing
else; the interleaved rope of the checkpoint equals ours after the rows are reordered
(their parity with transformers: test_arch_parity.py and test_arch_engines.py)."""

from __future__ import annotations

import pytest
import torch

from tandem.core.config.engine_args import EngineArgs
from tandem.core.engine.loader import load_model
from tandem.core.layers.latent_attention import LatentAttention, deinterleave
from tandem.core.testing import make_model


@pytest.mark.parametrize("arch", ["deepseek_v3", "deepseek_v3_plain"])
def test_the_cache_holds_one_latent_row_per_token(arch):
    path = make_model(arch=arch)
    config = EngineArgs(model=str(path), dtype="float32", block_size=4).create_config()
    hf = config.model.hf_config
    row = hf.kv_lora_rank + hf.qk_rope_head_dim
    assert (config.model.num_kv_heads, config.model.head_dim) == (1, row // 2)
    per_token = config.kv_bytes_per_block / (4 * hf.num_hidden_layers)  # bytes per layer
    assert per_token == row * 4  # fp32: K half + V half = the latent row
    plain = hf.num_attention_heads * (hf.qk_nope_head_dim + hf.qk_rope_head_dim + hf.v_head_dim)
    assert plain / row > 1.5  # full K and V of every head, had they been cached


def test_layers_follow_the_config():
    model = load_model(make_model(arch="deepseek_v3"))
    first, second = model.model.layers
    assert isinstance(first.self_attn, LatentAttention)
    assert type(first.mlp).__name__ == "GatedMLP"  # first_k_dense_replace = 1
    moe = second.mlp.moe
    assert (moe.scoring, moe.n_group, moe.topk_group, moe.routed_scaling) == ("sigmoid", 4, 2, 2.5)
    assert second.mlp.gate.e_score_correction_bias.abs().sum() > 0  # loaded, not zeros


def test_deinterleaving_keeps_the_pairwise_rope():
    """Rope on pairs (x0, x1), (x2, x3) ... equals rotate-half rope on the reordered dims."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    angle = torch.rand(5, 4, generator=g) * 6
    cos, sin = angle.cos(), angle.sin()

    def pairwise(x):
        a, b = x[:, 0::2], x[:, 1::2]
        return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(1)

    def halves(x):
        a, b = x[:, :4], x[:, 4:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

    weight = torch.cat((q, k)).t().contiguous()  # [8, 10]: rows are the dims
    deinterleave(weight, 0, 8, 8)
    q2, k2 = weight.t()[:5], weight.t()[5:]
    want = (pairwise(q) * pairwise(k)).sum(-1)
    torch.testing.assert_close((halves(q2) * halves(k2)).sum(-1), want)
