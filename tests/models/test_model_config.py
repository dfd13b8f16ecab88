"""Reading Llama-family configs: registry, rope settings (new and legacy), bad values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tandem.core.kv.window import kv_window
from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.layers.rotary import inv_freq
from tandem.core.models import get_model_class, supported_architectures
from tandem.core.models.architectures import build_spec
from tandem.core.spec.model import read_rope


def hf(**kw):
    base = dict(
        architectures=["LlamaForCausalLM"],
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
    )
    return SimpleNamespace(**{**base, **kw})


def test_registry():
    from tandem.core.config.model import SUPPORTED_ARCHITECTURES

    archs = supported_architectures()
    assert {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"} <= set(archs)
    assert archs == sorted(SUPPORTED_ARCHITECTURES)
    assert get_model_class("MistralForCausalLM").__name__ == "MistralForCausalLM"
    with pytest.raises(ValueError, match=r"must be one of .*LlamaForCausalLM.*got 'Gpt2'"):
        get_model_class("Gpt2")


def test_legacy_rope_attributes():
    rope = read_rope(hf(rope_theta=1234.0, rope_scaling={"type": "linear", "factor": 4.0}))
    assert (rope.theta, rope.type, rope.factor) == (1234.0, "linear", 4.0)
    assert read_rope(hf()).theta == 10000.0


def test_rope_parameters_take_precedence():
    rope = read_rope(
        hf(
            rope_theta=1.0,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 5e5,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    )
    assert (rope.theta, rope.type, rope.original_max_position) == (5e5, "llama3", 32)


def test_rope_matches_transformers_inv_freq():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    config = LlamaConfig(hidden_size=64, num_attention_heads=2, rope_parameters=params)
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    torch.testing.assert_close(inv_freq(32, read_rope(config)), expected)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1.0}}, "rope_type must be one"),
        ({"num_key_value_heads": 3}, "num_key_value_heads must be a positive divisor"),
        ({"hidden_size": 0}, r"config\.hidden_size must be a positive integer, got 0"),
        ({"architectures": []}, "config.architectures must name"),
        ({"head_dim": 5}, "head_dim must be even"),
    ],
)
def test_bad_configs(kw, match):
    with pytest.raises(ValueError, match=match):
        build_spec(hf(**kw))


def test_spec_traps():
    spec = build_spec(hf(architectures=["Qwen2ForCausalLM"], head_dim=12, tie_word_embeddings=True))
    assert spec.attention.qkv_bias and not spec.attention.o_bias and spec.tie_word_embeddings
    assert spec.head_dim == 12


@pytest.mark.parametrize(
    ("arch", "kw", "windows", "kv_window_"),
    [
        ("MistralForCausalLM", {"sliding_window": 8}, [8, 8, 8], 8),
        ("MistralForCausalLM", {"sliding_window": None}, [None] * 3, None),
        ("Qwen2ForCausalLM", {"max_window_layers": 0}, [6, 6, 6], 6),  # every layer
        ("Qwen2ForCausalLM", {"max_window_layers": 1}, [None, 6, 6], None),
        ("Qwen2ForCausalLM", {"use_sliding_window": False}, [None] * 3, None),
        ("Gemma2ForCausalLM", {"sliding_window": 8}, [8, None, 8], None),  # alternating
    ],
)
def test_windows_and_the_window_bounding_the_cache(arch, kw, windows, kv_window_):
    if arch == "Qwen2ForCausalLM":
        kw = {"use_sliding_window": True, "sliding_window": 6, **kw}
    if arch == "Gemma2ForCausalLM":
        kw = {"head_dim": 4, **kw}
    spec = build_spec(hf(architectures=[arch], num_hidden_layers=3, **kw))
    assert list(spec.windows) == windows
    assert kv_window(spec.windows) == kv_window_


def test_forward_rejects_bad_inputs(tandem_models):
    model = tandem_models["llama"]
    meta = build_metadata([2], [2], [[0]], 4)
    caches = [(torch.zeros(2, 4, 2, 16), torch.zeros(2, 4, 2, 16))] * 2
    ids, pos = torch.tensor([5, 6]), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="input_ids must be a 1-D long tensor"):
        model(ids.int(), pos, caches, meta)
    with pytest.raises(ValueError, match="positions must have the shape"):
        model(ids, pos[:1], caches, meta)
    with pytest.raises(ValueError, match=r"one \(k_cache, v_cache\) per layer \(2\), got 1"):
        model(ids, pos, caches[:1], meta)
    with pytest.raises(ValueError, match="attn_metadata covers 2 tokens but input_ids has 3"):
        model(torch.tensor([5, 6, 7]), torch.tensor([0, 1, 2]), caches, meta)
    with pytest.raises(ValueError, match=r"hidden must have shape \[N, 64\]"):
        model.compute_logits(torch.zeros(2, 3))


@pytest.mark.parametrize(
    ("arch", "kw", "match"),
    [
        ("LlamaForCausalLM", {"hidden_act": "relu"}, r"config\.hidden_act must be one of .*'relu'"),
        (
            "Gemma2ForCausalLM",
            {"hidden_activation": "gelu"},
            r"config\.hidden_activation must be one of .*got 'gelu'",
        ),
        (
            "Gemma3ForCausalLM",
            {"use_bidirectional_attention": True},
            r"config\.use_bidirectional_attention must be false",
        ),
        (
            "Gemma3ForCausalLM",
            {"rope_parameters": {"full_attention": {"rope_type": "dynamic", "rope_theta": 1.0}}},
            r"rope_type must be one of default, linear, llama3, longrope, yarn, got 'dynamic'",
        ),
        (
            "Qwen2ForCausalLM",
            {"layer_types": ["full_attention"], "use_sliding_window": True, "sliding_window": 4},
            r"config\.layer_types must list one entry per layer \(1\)|one entry per layer",
        ),
        (
            "MixtralForCausalLM",
            {"num_local_experts": 2, "num_experts_per_tok": 3},
            r"config\.num_experts_per_tok must be <= num_experts \(2\), got 3",
        ),
        (
            "Phi3ForCausalLM",
            {"rope_parameters": {"rope_type": "longrope", "short_factor": None}},
            r"longrope needs rope_parameters\.short_factor",
        ),
        ("Qwen3ForCausalLM", {"sliding_window": -3}, r"config\.sliding_window must be a positive"),
    ],
)
def test_configs_we_cannot_honour_name_the_field_and_value(arch, kw, match):
    with pytest.raises(ValueError, match=match):
        build_spec(hf(architectures=[arch], num_hidden_layers=2, **kw))
