"""GGUF checkpoints read in place: the file parser, names, rotary rows, the config from
metadata, the tokenizer, refusals, and transformers' own reader as the outside reference."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file

from tandem.core.gguf import is_gguf, open_checkpoint
from tandem.core.gguf.export import export_hf
from tandem.core.gguf.file import GGUFFile
from tandem.core.gguf.types import KNOWN, READ, block_shape, type_name
from tandem.core.models.architectures import GGUF_ARCHITECTURES, gguf_names
from tandem.core.models.architectures.gguf_names import unpermute
from tandem.core.testing import make_model
from tandem.core.testing.gguf_writer import gguf_name, permute, write_gguf

DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}
LLAMA = GGUF_ARCHITECTURES["llama"]


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
    assert LLAMA.hf_name(gguf) == hf and gguf_name(hf) == gguf


def test_unknown_tensor_names_and_architectures_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'blk\.0\.attn_qkv\.weight' is not part of a 'llama'"):
        LLAMA.hf_name("blk.0.attn_qkv.weight")
    with pytest.raises(ValueError, match=r"GGUF architecture 'mamba' is not supported; supported"):
        gguf_names("mamba")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    src = make_model(size="tiny", arch="llama", rope_parameters=DEFAULT_ROPE)
    return src, write_gguf(src, tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_the_parser_reads_what_the_gguf_package_reads(tiny_gguf) -> None:
    from gguf import GGUFReader

    path = tiny_gguf[1]
    ours, theirs = GGUFFile(path), GGUFReader(str(path))
    assert set(ours.tensors) == {t.name for t in theirs.tensors}
    for t in theirs.tensors:
        assert np.array_equal(ours.data(t.name), np.asarray(t.data)), t.name
        assert ours.tensors[t.name].type == int(t.tensor_type)
        floats = ours.float_values(t.name)  # read without numpy: F32 and F16 only
        if int(t.tensor_type) in (0, 1):
            assert floats == np.asarray(t.data, np.float32).reshape(-1).tolist(), t.name
        else:
            assert floats is None, t.name
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        want = field.contents()
        assert ours.value(key) == (list(want) if isinstance(want, list) else want), key
    assert ours.count("tokenizer.ggml.tokens") == len(theirs.fields["tokenizer.ggml.tokens"].data)


def test_the_types_read_have_the_gguf_packages_names_and_sizes() -> None:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    assert set(KNOWN) == set(READ)
    for kind, (name, values, size) in KNOWN.items():
        assert (name, (values, size)) == (
            GGMLQuantizationType(kind).name,
            GGML_QUANT_SIZES[GGMLQuantizationType(kind)],
        )
    assert type_name(int(GGMLQuantizationType.IQ4_NL)) == "IQ4_NL"  # from the package
    assert block_shape(int(GGMLQuantizationType.IQ4_NL)) == (32, 18)
    with pytest.raises(ValueError, match="GGML tensor type 999 is unknown"):
        block_shape(999)


def test_export_gives_back_every_tensor_config_and_tokenizer(tiny_gguf, tmp_path) -> None:
    from tandem.core.text.tokenizer import load_tokenizer

    src, path = tiny_gguf
    out = export_hf(path, tmp_path / "out")
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


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_a_gguf_path_runs_like_its_directory_and_writes_no_weights(
    tiny_gguf, tmp_path, monkeypatch
) -> None:
    from tandem.core import LLM, SamplingParams

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    src, path = tiny_gguf
    assert is_gguf(path) and not is_gguf(src)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    runs = []
    for model, quantization in ((src, None), (path, None), (path, "int8")):
        with LLM(model=model, engine="v0", max_model_len=64, quantization=quantization) as llm:
            runs.append(llm.generate("one two three", params, use_tqdm=False)[0].outputs[0])
    assert runs[0].token_ids == runs[1].token_ids
    assert len(runs[2].token_ids) == 8
    written = {name: size for name, size in _files(tmp_path).items() if "native" not in name}
    assert written and all(name.startswith("tokenizers/") for name in written), written
    assert sum(written.values()) < 1 << 20  # the tokenizer alone


def test_a_relative_path_stays_found_from_another_directory(tiny_gguf, tmp_path, monkeypatch):
    from tandem.core.config.engine_args import EngineArgs

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cache"))
    path = Path(tiny_gguf[1])
    monkeypatch.chdir(path.parent)
    config = EngineArgs(model=path.name, max_model_len=64).create_config()
    assert config.model.path == path.resolve() and config.quantization == "gguf"


def test_files_that_are_not_gguf_are_refused(tiny_gguf, tmp_path) -> None:
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match=r"is not a GGUF file \(its first bytes"):
        open_checkpoint(bad)
    bad.write_bytes(b"")
    with pytest.raises(ValueError, match="is not a GGUF file: it is empty"):
        open_checkpoint(bad)
    whole = Path(tiny_gguf[1]).read_bytes()
    bad.write_bytes(whole[: len(whole) - 100])
    with pytest.raises(ValueError, match=r"is truncated: tensor '.*' ends past the file's end"):
        open_checkpoint(bad)
    with pytest.raises(ValueError, match="GGUF file does not exist"):
        open_checkpoint(tmp_path / "missing.gguf")


def test_a_type_without_kernels_is_refused_before_any_work(tmp_path) -> None:
    import gguf

    out = tmp_path / "iq.gguf"
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_block_count(1)
    raw = np.zeros((4, 18), dtype=np.uint8)  # IQ4_NL: blocks of 32 values in 18 bytes
    w.add_tensor("blk.0.ffn_up.weight", raw, raw_dtype=gguf.GGMLQuantizationType.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match=r"'blk\.0\.ffn_up\.weight' \(IQ4_NL.*does not read"):
        open_checkpoint(out)


def _config(path):
    from tandem.core.config.model import load_model_config

    return load_model_config(path, max_model_len=64)


@pytest.mark.slow
def test_smollm2_reads_as_transformers_reads_it(smollm2_gguf, tmp_path) -> None:
    """Our reader against transformers' GGUF loader on the real Q4_1 file: same weights."""
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("transformers reads GGUF only with accelerate installed")
    import torch
    from transformers import AutoModelForCausalLM

    ours = {t.name: t.floats() for t in open_checkpoint(smollm2_gguf).tensors()}
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
    import torch
    from transformers import AutoModelForCausalLM

    src = make_model(size="tiny", arch=arch, **overrides)
    path = write_gguf(src, tmp_path / f"{arch}.gguf")
    checkpoint = open_checkpoint(path)
    a = load_file(str(src / "model.safetensors"))
    b = {t.name: t.floats() for t in checkpoint.tensors()}
    assert set(a) == set(b)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    want = json.loads((src / "config.json").read_text())
    got = checkpoint.config
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


def test_pages_released_come_back_from_the_file(tiny_gguf) -> None:
    """Loading drops the file pages of tensors it copied; a page dropped and read again
    comes back from the file, so releasing never changes a value."""
    path = tiny_gguf[1]
    f = GGUFFile(path)
    names = list(f.tensors)
    before = {n: np.array(f.data(n)) for n in names}
    keep = f.data(names[0])
    start = keep.__array_interface__["data"][0]
    assert f.release([(start, start + keep.nbytes)]) > 0
    f.drop(f.data(names[-1]))
    assert all(np.array_equal(f.data(n), before[n]) for n in names)
