"""Mixture-of-experts GGUF files (llama.cpp's ``llama`` with experts, ``qwen2moe``,
``qwen3moe``, ``deepseek2``): the names and joins that undo llama.cpp's converter, then
files made by the converter itself read back: every tensor equal to the checkpoint's, the
same spec, the same greedy tokens, and llama.cpp's own logits on the same file.

The files come from ``gguf_moe_files.made_or_skip`` (the converter run here, where it is:
``benchmarks/llama_cpp_converter.sh`` unpacks it, as CI does; llama.cpp's logits need the
compiled venv of ``benchmarks/llama_cpp_venv.sh``); to run on committed files instead, make
``moe_gguf`` return (file, checkpoint) pairs from them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from tandem.core.config.model import load_model_config
from tandem.core.gguf import open_checkpoint
from tandem.core.models.architectures import GGUF_ARCHITECTURES, build_spec

from .gguf_moe_files import SOURCES, made_or_skip

DEEPSEEK2 = GGUF_ARCHITECTURES["deepseek2"]
KV_B = DEEPSEEK2.joined["self_attn.kv_b_proj.weight"]


@pytest.mark.parametrize(
    ("arch", "gguf", "hf"),
    [
        ("llama", "blk.1.ffn_up_exps.weight", "model.layers.1.block_sparse_moe.experts.{e}.w3"),
        ("qwen2moe", "blk.0.ffn_gate_inp.weight", "model.layers.0.mlp.gate.weight"),
        ("qwen2moe", "blk.2.ffn_down_exps.weight", "model.layers.2.mlp.experts.{e}.down_proj"),
        ("qwen2moe", "blk.0.ffn_up_shexp.weight", "model.layers.0.mlp.shared_expert.up_proj"),
        ("qwen2moe", "blk.0.ffn_gate_inp_shexp.weight", "model.layers.0.mlp.shared_expert_gate"),
        ("qwen3moe", "blk.3.ffn_gate_exps.weight", "model.layers.3.mlp.experts.{e}.gate_proj"),
        ("qwen3moe", "blk.3.attn_k_norm.weight", "model.layers.3.self_attn.k_norm.weight"),
        ("deepseek2", "blk.1.exp_probs_b.bias", "model.layers.1.mlp.gate.e_score_correction_bias"),
        ("deepseek2", "blk.0.attn_q_a_norm.weight", "model.layers.0.self_attn.q_a_layernorm"),
        ("deepseek2", "blk.0.attn_kv_a_mqa.weight", "model.layers.0.self_attn.kv_a_proj_with_mqa"),
        ("deepseek2", "blk.4.attn_k_b.weight", "model.layers.4.self_attn.kv_b_proj.weight"),
        ("deepseek2", "blk.4.attn_v_b.weight", "model.layers.4.self_attn.kv_b_proj.weight"),
        ("deepseek2", "blk.4.attn_kv_b.weight", "model.layers.4.self_attn.kv_b_proj.weight"),
        ("deepseek2", "blk.2.ffn_down_shexp.weight", "model.layers.2.mlp.shared_experts.down_proj"),
    ],
)
def test_moe_names_map_to_hugging_faces(arch, gguf, hf) -> None:
    got = GGUF_ARCHITECTURES[arch].hf_name(gguf)
    assert got == (hf if hf.endswith(("weight", "bias")) else f"{hf}.weight")


@pytest.mark.parametrize(("nope", "v", "rank"), [(16, 12, 40), (8, 8, 8), (6, 10, 4)])
@pytest.mark.parametrize("layout", ["written", "untransposed", "flat", "v transposed"])
def test_kv_b_is_put_back_from_its_halves(nope, v, rank, layout) -> None:
    """The converter's split: per head, the key rows transposed [rank, nope], the value
    rows [v, rank]; files may hold either half the other way round (where the shape
    tells) or the heads flattened."""
    heads = 3
    kv_b = np.random.default_rng(0).standard_normal((heads * (nope + v), rank)).astype("f4")
    per_head = kv_b.reshape(heads, nope + v, rank)
    k_b, v_b = per_head[:, :nope], per_head[:, nope:]
    if layout == "written" or nope == rank:
        k_b = k_b.transpose(0, 2, 1)
    if layout == "flat":
        k_b, v_b = k_b.reshape(-1, k_b.shape[-1]), v_b.reshape(-1, rank)
    if layout == "v transposed" and v != rank:
        v_b = v_b.transpose(0, 2, 1)
    config = {"num_attention_heads": heads, "kv_lora_rank": rank}
    config |= {"qk_nope_head_dim": nope, "v_head_dim": v}
    assert np.array_equal(KV_B.join([k_b, v_b], config), kv_b)


class FakeMetadata:
    """A deepseek2 file's metadata, as a config reader sees it."""

    architecture = "deepseek2"

    def __init__(self, values: dict, tensors: set[str]) -> None:
        self.values, self.tensor_names = values, frozenset(tensors)

    def value(self, key, default=None):
        return self.values.get(key, default)

    def count(self, key):
        return None

    def floats(self, name):
        raise KeyError(name)


DEEPSEEK2_META = {
    **{
        f"deepseek2.{k}": v
        for k, v in {
            "embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 1,
            "block_count": 2, "context_length": 512, "vocab_size": 512, "expert_count": 8,
            "expert_used_count": 2, "expert_feed_forward_length": 16, "rope.dimension_count": 8,
            "attention.key_length": 48, "attention.value_length": 40,
            "attention.kv_lora_rank": 40, "leading_dense_block_count": 1,
            "expert_gating_func": 2, "rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
            "rope.scaling.original_context_length": 128,
        }.items()
    }
}  # fmt: skip


def test_deepseek2_sizes_routing_and_yarn_from_metadata() -> None:
    mla = {"deepseek2.attention.key_length_mla": 24, "deepseek2.attention.value_length_mla": 12}
    log_mul = {"deepseek2.rope.scaling.yarn_log_multiplier": 0.0707}
    config = DEEPSEEK2.config(
        FakeMetadata({**DEEPSEEK2_META, **mla, **log_mul}, {"blk.1.exp_probs_b.bias"})
    )
    assert (config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]) == (
        16,
        8,
        12,
    )
    assert config["num_key_value_heads"] == 4 and config["q_lora_rank"] is None
    assert (
        config["rope_parameters"]["mscale_all_dim"] == config["rope_parameters"]["mscale"] == 0.707
    )
    assert (config["routed_scaling_factor"], config["norm_topk_prob"], config["n_group"]) == (
        1.0,
        False,
        1,
    )
    legacy = DEEPSEEK2.config(FakeMetadata(DEEPSEEK2_META, {"blk.1.exp_probs_b.bias"}))
    assert (legacy["qk_nope_head_dim"], legacy["v_head_dim"]) == (40, 40)  # no *_mla keys
    assert legacy["rope_parameters"]["attention_factor"] == 1.0  # no log multiplier: none


@pytest.mark.parametrize(
    ("change", "tensors", "match"),
    [
        ({"deepseek2.expert_gating_func": None}, {"blk.1.exp_probs_b.bias"}, r"is None \(llama"),
        ({"deepseek2.expert_gating_func": 1}, {"blk.1.exp_probs_b.bias"}, "sigmoid routing only"),
        ({}, set(), r"blk\.1\.exp_probs_b\.bias \(the routing score bias\) is missing"),
    ],
)
def test_deepseek2_routing_it_cannot_run_is_refused(change, tensors, match) -> None:
    with pytest.raises(ValueError, match=match):
        DEEPSEEK2.config(FakeMetadata({**DEEPSEEK2_META, **change}, tensors))


# -- files made by llama.cpp's converter ---------------------------------------------------


@pytest.fixture(scope="session")
def moe_gguf():
    return made_or_skip()


@pytest.mark.parametrize("name", list(SOURCES))
def test_every_tensor_and_the_spec_equal_the_checkpoints(moe_gguf, name, tmp_path, monkeypatch):
    path, hf_dir = moe_gguf(name)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))  # the file's tokenizer goes here
    want = {k: v for f in hf_dir.glob("*.safetensors") for k, v in load_file(str(f)).items()}
    got = {t.name: t.floats() for t in open_checkpoint(path).tensors()}
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert got[key].shape == value.shape and np.array_equal(got[key], value), key
    a, b = load_model_config(path), load_model_config(hf_dir)
    assert build_spec(a.hf_config, a.architecture) == build_spec(b.hf_config, b.architecture)


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "deepseek_v3_plain" else n for n in SOURCES],
)  # deepseek_v3_plain has 27 layers (see gguf_moe_files.SOURCES)
def test_greedy_tokens_equal_the_checkpoints(moe_gguf, name, tmp_path, monkeypatch) -> None:
    """The same prompt ids (transformers builds a Qwen file's tokenizer with Qwen's own
    split, not the file's ``gpt-2`` one, and the tiny tokenizer is neither)."""
    from tandem.core import LLM, SamplingParams
    from tandem.core.text.tokenizer import load_tokenizer

    path, hf_dir = moe_gguf(name)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    encode = load_tokenizer(hf_dir).encode
    prompts = [{"prompt_token_ids": encode(t)} for t in ("one two three", "Item 3: 12 plus 5")]
    runs = []
    for model in (hf_dir, path):
        with LLM(model=str(model), engine="v0", max_model_len=64) as llm:
            runs.append(
                [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
            )
    assert runs[0] == runs[1]


# Mixtral's tiny routers tie experts 0 and 1 on purpose; llama.cpp breaks such ties in
# another order than transformers, so its file is checked against transformers only.
@pytest.mark.parametrize("name", [n for n in SOURCES if n != "mixtral"])
def test_logits_equal_llama_cpps_own(moe_gguf, name, paged_runner, tmp_path, monkeypatch):
    """What llama.cpp computes from the file is what Tandem computes from it: the config
    read from the metadata means to Tandem what it means to llama.cpp."""
    from tandem.core.engine.loader import load_model

    path, _ = moe_gguf(name)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    tokens = [1, *torch.randint(4, 512, (24,), generator=torch.Generator().manual_seed(0)).tolist()]
    theirs = torch.tensor(moe_gguf.logits(path, tokens))
    ours = paged_runner(load_model(path)).step([(0, tokens)])
    torch.testing.assert_close(ours, theirs.float(), atol=2e-4, rtol=0)
