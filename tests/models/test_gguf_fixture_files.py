"""The committed GGUF files made by llama.cpp (tests/models/gguf_files) and their sources.

Each file must be what the manifest says (digest, architecture, tensor types), and the
checkpoint the manifest rebuilds must be the one the file was converted from: its float32
tensors equal the F32 file's, with only the converter's known changes (Gemma's norm + 1).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from tandem.core.testing.gguf_fixtures import (
    build_source,
    gguf_fixture,
    load_manifest,
    source_checkpoint,
)

FIXTURES = Path(__file__).parent / "gguf_files"
MANIFEST = load_manifest(FIXTURES)
F32_FILES = sorted(name for name, r in MANIFEST["files"].items() if r["format"] == "F32")
FAST = {"qwen2-f32.gguf", "gemma2-f32.gguf", "deepseek2-f32.gguf"}  # BPE, SentencePiece, extra


def _reader(path: Path):
    gguf = pytest.importorskip("gguf")
    return gguf.GGUFReader(path)


def test_the_manifest_lists_every_file_with_its_digest() -> None:
    on_disk = sorted(p.name for p in FIXTURES.glob("*.gguf"))
    assert on_disk == sorted(MANIFEST["files"])
    for name, record in MANIFEST["files"].items():
        data = (FIXTURES / name).read_bytes()
        assert len(data) == record["bytes"] < 1 << 20, name
        assert hashlib.sha256(data).hexdigest() == record["sha256"], name
        assert record["source"] in MANIFEST["sources"], name


@pytest.mark.parametrize("name", sorted(MANIFEST["files"]))
def test_each_file_has_the_recorded_architecture_and_tensor_types(name: str) -> None:
    record = MANIFEST["files"][name]
    reader = _reader(FIXTURES / name)
    assert reader.fields["general.architecture"].contents() == record["gguf_architecture"]
    types = Counter(t.tensor_type.name for t in reader.tensors)
    assert dict(types) == record["tensor_types"]
    assert record["checks"]["summary"]["llama_cpp_loads"], f"llama.cpp could not run {name}"


def _source_params(name: str, tmp_path: Path) -> tuple[dict, dict]:
    source = MANIFEST["files"][name]["source"]
    hf_dir = source_checkpoint(FIXTURES, source, tmp_path / source)
    return load_file(str(hf_dir / "model.safetensors")), json.loads(
        (hf_dir / "config.json").read_text()
    )


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[] if n in FAST else [pytest.mark.slow]) for n in F32_FILES]
)
def test_the_rebuilt_source_is_the_one_the_file_was_converted_from(name, tmp_path) -> None:
    weights, config = _source_params(name, tmp_path)
    tensors = {t.name: np.asarray(t.data) for t in _reader(FIXTURES / name).tensors}
    embed = weights["model.embed_tokens.weight"]
    got = tensors["token_embd.weight"]  # ggml ne (hidden, vocab) reads as numpy (vocab, hidden)
    assert np.array_equal(got, embed[: got.shape[0]])
    shift = 1.0 if config["model_type"].startswith("gemma") else 0.0  # stored as w - 1
    assert np.array_equal(tensors["output_norm.weight"], weights["model.norm.weight"] + shift)


def test_a_source_carries_its_tokenizer_and_config_edits(tmp_path) -> None:
    gemma = source_checkpoint(FIXTURES, "gemma2", tmp_path / "gemma2")
    assert (gemma / "tokenizer.model").is_file()
    assert json.loads((gemma / "tokenizer_config.json").read_text())["add_prefix_space"] is False
    deepseek = source_checkpoint(FIXTURES, "deepseek2", tmp_path / "deepseek2")
    assert json.loads((deepseek / "config.json").read_text())["scoring_func"] == "sigmoid"


def test_gguf_fixture_rebuilds_once_in_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    path, hf_dir = gguf_fixture(FIXTURES, "qwen2-q4_k_m.gguf")
    assert path == FIXTURES / "qwen2-q4_k_m.gguf" and hf_dir.parent == tmp_path / "gguf-sources"
    stamp = (hf_dir / "gguf_source.json").stat().st_mtime_ns
    assert gguf_fixture(FIXTURES, "qwen2-f32.gguf")[1] == hf_dir
    assert (hf_dir / "gguf_source.json").stat().st_mtime_ns == stamp


def test_bad_names_and_directories_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"name must be one of .*qwen2-f32\.gguf.*'nope\.gguf'"):
        gguf_fixture(FIXTURES, "nope.gguf")
    with pytest.raises(ValueError, match=r"source must be one of .*'nope'"):
        source_checkpoint(FIXTURES, "nope")
    with pytest.raises(FileNotFoundError, match=r"has no manifest\.json"):
        load_manifest(tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(ValueError, match="already holds something else"):
        build_source(MANIFEST["sources"]["qwen2"], FIXTURES, tmp_path / "taken")
