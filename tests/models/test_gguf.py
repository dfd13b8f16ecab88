"""GGUF checkpoints: names, rotary row order, a round trip, and transformers' own reader."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file

from tandem.core.gguf_checkpoint import convert, hf_name, is_gguf, materialize, unpermute
from tandem.core.testing import make_model
from tandem.core.testing.gguf_writer import gguf_name, permute, write_gguf

DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


@settings(max_examples=40, deadline=None)
@given(heads=st.integers(1, 6), half=st.integers(1, 8), cols=st.integers(1, 5), seed=st.integers())
def test_unpermute_undoes_llama_cpp_rotary_order(heads, half, cols, seed) -> None:
    w = np.random.default_rng(seed % 2**32).standard_normal((heads * 2 * half, cols))
    assert np.array_equal(unpermute(permute(w, heads), heads), w)
    if half > 1:
        assert not np.array_equal(permute(w, heads), w)


@pytest.mark.parametrize(
    ("gguf", "hf"),
    [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        ("blk.12.attn_q.weight", "model.layers.12.self_attn.q_proj.weight"),
        ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
        ("blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"),
    ],
)
def test_tensor_names_map_both_ways(gguf, hf) -> None:
    assert hf_name(gguf) == hf and gguf_name(hf) == gguf


def test_unknown_tensor_names_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'blk\.0\.attn_qkv\.weight' has no Hugging Face"):
        hf_name("blk.0.attn_qkv.weight")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    src = make_model(size="tiny", arch="llama", rope_parameters=DEFAULT_ROPE)
    return src, write_gguf(src, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_round_trip_gives_back_every_tensor_config_and_tokenizer(tiny_gguf, tmp_path) -> None:
    import json

    from tandem.core.tokenizer import load_tokenizer

    src, path = tiny_gguf
    out = convert(path, tmp_path / "out")
    a, b = load_file(str(src / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(a) == set(b)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    want, got = (
        json.loads((src / "config.json").read_text()),
        json.loads((out / "config.json").read_text()),
    )
    for key in ("hidden_size", "num_key_value_heads", "rms_norm_eps", "vocab_size", "eos_token_id"):
        assert got[key] == want[key], key
    text = "Item 3: apples and 12 plus 5 is 17."
    assert load_tokenizer(out).encode(text) == load_tokenizer(src).encode(text)


def test_a_gguf_path_runs_like_its_directory(tiny_gguf, tmp_path, monkeypatch) -> None:
    from tandem.core import LLM, SamplingParams

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    src, path = tiny_gguf
    assert is_gguf(path) and not is_gguf(src)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    runs = []
    for model in (src, path):
        with LLM(model=model, engine="v0", max_model_len=64) as llm:
            runs.append(llm.generate("one two three", params, use_tqdm=False)[0].outputs[0])
    assert runs[0].token_ids == runs[1].token_ids
    again = materialize(path)
    assert again.parent == tmp_path / "models" and (again / "config.json").is_file()


def test_a_relative_path_stays_found_from_another_directory(tiny_gguf, tmp_path, monkeypatch):
    """quantization='gguf' finds the file through the converted directory's stamp."""
    from tandem.core.gguf_checkpoint import source_of

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cache"))
    path = Path(tiny_gguf[1])
    monkeypatch.chdir(path.parent)
    converted = materialize(path.name)
    monkeypatch.chdir(tmp_path)
    assert source_of(converted) == path.resolve()
    # a stamp written with a relative path (older versions) is mended on the next use
    (converted / "tandem_gguf.json").write_text(json.dumps({"source": path.name, "version": 1}))
    assert source_of(converted) is None
    assert materialize(path) == converted and source_of(converted) == path.resolve()


def test_a_file_that_is_not_gguf_is_refused(tmp_path) -> None:
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match=r"not a \.gguf file"):
        materialize(bad)


@pytest.mark.slow
def test_smollm2_reads_as_transformers_reads_it(smollm2_gguf) -> None:
    """Our reader against transformers' GGUF loader on the real Q4_1 file: same weights."""
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("transformers reads GGUF only with accelerate installed")
    import torch
    from transformers import AutoModelForCausalLM

    ours = load_file(str(materialize(smollm2_gguf) / "model.safetensors"))
    theirs = AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, dtype=torch.float32
    ).state_dict()
    assert set(ours) == set(theirs) - {"lm_head.weight"}  # tied: transformers lists it too
    worst = max(float((torch.from_numpy(ours[k]) - theirs[k]).abs().max()) for k in ours)
    assert worst < 1e-6, worst


@pytest.mark.parametrize(
    ("arch", "overrides", "outside"),
    [
        ("qwen2", {}, True),
        ("qwen3", {}, False),  # head_dim 24: transformers' GGUF reader assumes 128
        ("qwen3", {"head_dim": 128}, True),
    ],
)
def test_qwen_files_read_back_and_as_transformers_reads_them(
    arch, overrides, outside, tmp_path
) -> None:
    """Qwen's q/k rows stay as they are (its rope rotates halves); Qwen3's head size comes
    from the key length. transformers' own GGUF reader, an outside reading of llama.cpp's
    layout, must find the same weights in the file."""
    import json

    import torch
    from transformers import AutoModelForCausalLM

    src = make_model(size="tiny", arch=arch, **overrides)
    path = write_gguf(src, tmp_path / f"{arch}.gguf")
    out = convert(path, tmp_path / "out")
    a, b = load_file(str(src / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(a) == set(b)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    want = json.loads((src / "config.json").read_text())
    got = json.loads((out / "config.json").read_text())
    for key in ("architectures", "model_type", "num_attention_heads", "num_key_value_heads"):
        assert got[key] == want[key], key
    assert got["head_dim"] == (want.get("head_dim") or want["hidden_size"] // 4)
    if not outside:
        return
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("transformers reads GGUF only with accelerate installed")
    theirs = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, dtype=torch.float32
    ).state_dict()
    for key, value in b.items():
        assert torch.equal(torch.from_numpy(value), theirs[key]), key
