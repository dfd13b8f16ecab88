"""Loading safetensors checkpoints: single vs sharded, and the errors for broken ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tandem.core.engine.loader import INDEX_FILE, load_model, weight_files


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_sharded_and_single_load_identical_weights(model_dirs, sharded_dir):
    assert len(weight_files(sharded_dir)) > 1
    assert weight_files(model_dirs["llama"]) == [model_dirs["llama"] / "model.safetensors"]
    single = load_model(model_dirs["llama"]).state_dict()
    sharded = load_model(sharded_dir).state_dict()
    assert single.keys() == sharded.keys()
    for name in single:
        assert torch.equal(single[name], sharded[name]), name


def test_loaded_model_is_eval_without_grad(model_dirs):
    model = load_model(model_dirs["qwen2"])
    assert not model.training
    assert all(not p.requires_grad for p in model.parameters())
    assert model.lm_head is None  # tied embeddings


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_linear_weights_are_packed_at_load(model_dirs, arch):
    """The first step does not pay for packing: load_model packed every fp32 layer."""
    from tandem.core.layers.linear import Linear

    model = load_model(model_dirs[arch])
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert linears and all(m.form.pack.holds(m.weight) for m in linears)
    if model.lm_head is None:  # a tied LM head multiplies by the embedding's copy
        assert model._tied_pack.holds(model.model.embed_tokens.weight)
    from tandem.core.layers.kernel_choice import resolve_kernels

    torch_linear = resolve_kernels(linear="torch")  # plain F.linear: nothing to pack
    plain = load_model(model_dirs[arch], kernels=torch_linear)
    assert not any(m.form.pack.holds(m.weight) for m in plain.modules() if isinstance(m, Linear))


def test_dtype_is_applied(model_dirs):
    model = load_model(model_dirs["mistral"], dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_missing_shard_is_named(sharded_dir, tmp_path):
    broken = copy_checkpoint(sharded_dir, tmp_path / "ckpt")
    index = json.loads((broken / INDEX_FILE).read_text())
    victim = sorted(set(index["weight_map"].values()))[1]
    (broken / victim).unlink()
    with pytest.raises(ValueError, match=f"missing shard.*{victim}"):
        load_model(broken)


def test_wrong_shape_names_tensor_and_both_shapes(model_dirs, tmp_path):
    broken = copy_checkpoint(model_dirs["llama"], tmp_path / "ckpt")
    tensors = load_file(broken / "model.safetensors")
    name = "model.layers.1.self_attn.k_proj.weight"
    expected = list(tensors[name].shape)
    tensors[name] = torch.zeros(expected[0] + 1, expected[1])
    save_file(tensors, broken / "model.safetensors")
    with pytest.raises(ValueError) as info:
        load_model(broken)
    message = str(info.value)
    assert name in message
    assert str([expected[0] + 1, expected[1]]) in message and str(expected) in message


def test_missing_and_unexpected_weights_are_listed(model_dirs, tmp_path):
    broken = copy_checkpoint(model_dirs["llama"], tmp_path / "ckpt")
    tensors = load_file(broken / "model.safetensors")
    del tensors["model.norm.weight"]
    tensors["model.extra.weight"] = torch.zeros(2)
    save_file(tensors, broken / "model.safetensors")
    with pytest.raises(
        ValueError,
        match=r"missing weights \(1\): model\.norm\.weight.*"
        r"unexpected weights \(1\): model\.extra\.weight",
    ):
        load_model(broken)


def test_no_weights_and_no_config(model_dirs, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"no config\.json"):
        load_model(empty)
    shutil.copy(model_dirs["llama"] / "config.json", empty / "config.json")
    with pytest.raises(ValueError, match=r"expected model\.safetensors or"):
        load_model(empty)


def test_bad_dtype_and_model_config(model_dirs):
    with pytest.raises(TypeError, match=r"dtype must be a floating torch\.dtype"):
        load_model(model_dirs["llama"], dtype=torch.int32)
    with pytest.raises(TypeError, match="model_config must be a checkpoint path"):
        load_model(42)


def test_model_config_object_is_accepted(model_dirs):
    from transformers import AutoConfig

    class Config:
        model = str(model_dirs["llama"])
        hf_config = AutoConfig.from_pretrained(model_dirs["llama"])
        dtype = torch.float16

    model = load_model(Config())
    assert model.model.embed_tokens.weight.dtype == torch.float16


def test_engine_model_config_is_accepted(model_dirs):
    from tandem.core.config.engine_args import EngineArgs

    config = EngineArgs(model=str(model_dirs["qwen2"]), device="cpu").create_config()
    model = load_model(config.model, device=config.device, dtype=config.dtype)
    assert type(model).__name__ == "Qwen2ForCausalLM"


def test_an_eager_engine_never_imports_dynamo(tiny_model, fresh_python) -> None:
    """torch._dynamo costs ~1 s of an engine's start-up and an eager engine needs none of
    it: the model is built without its random init (on the meta device those ops import
    it) and the ops are called straight (a torch.ops call imports it)."""
    code = f"""
import sys
from tandem.core import LLM, SamplingParams
with LLM(model={str(tiny_model)!r}, engine="v0") as llm:
    sampled = SamplingParams(temperature=0.8, top_k=5, max_tokens=4, logprobs=2, seed=1)
    llm.generate(["a b c"], sampled, use_tqdm=False)
    llm.generate(["a b c d e f"], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
assert "torch._dynamo" not in sys.modules, "torch._dynamo was imported"
"""
    fresh_python(code)
