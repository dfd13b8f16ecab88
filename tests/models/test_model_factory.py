"""make_model: deterministic, cached on disk, atomic, and strict about its settings."""

from __future__ import annotations

import json

import pytest
import torch

import tandem.core.testing.models as factory
from tandem.core.testing import MODEL_SIZES, make_model


def test_deterministic_bytes(tmp_path):
    a = make_model(tmp_path / "a", arch="qwen2")
    b = make_model(tmp_path / "b", arch="qwen2")
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_seed_changes_weights(tmp_path):
    a = make_model(tmp_path / "a", num_hidden_layers=1)
    b = make_model(tmp_path / "b", num_hidden_layers=1, seed=1)
    assert (a / "model.safetensors").read_bytes() != (b / "model.safetensors").read_bytes()


def test_cached_under_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    first = make_model(arch="mistral")
    assert first.parent == tmp_path / "models"
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    calls = []
    monkeypatch.setattr(factory, "_write", lambda *a: calls.append(a))
    assert make_model(arch="mistral") == first
    assert calls == []
    assert (first / "model.safetensors").stat().st_mtime_ns == mtime
    other = make_model(arch="mistral", num_hidden_layers=1)  # a new setting: a new dir
    assert other != first and len(calls) == 1


def test_checkpoint_contents(tmp_path):
    path = make_model(tmp_path / "m", arch="llama")
    config = json.loads((path / "config.json").read_text())
    generation = json.loads((path / "generation_config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["rope_parameters"]["rope_type"] == "llama3"
    assert config["hidden_size"] == MODEL_SIZES["tiny"]["hidden_size"]
    assert generation["eos_token_id"] == config["eos_token_id"] is not None
    assert (path / "tokenizer.json").is_file()


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def boom(directory, spec):
        (directory / "model.safetensors").write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(factory, "_write", boom)
    with pytest.raises(OSError, match="disk full"):
        make_model(tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_lost_race_returns_the_winner(tmp_path, monkeypatch):
    target = tmp_path / "m"
    real = factory._write

    def racing(directory, spec):
        real(directory, spec)
        monkeypatch.setattr(factory, "_write", real)
        make_model(target, num_hidden_layers=1)  # another worker finishes first

    monkeypatch.setattr(factory, "_write", racing)
    assert make_model(target, num_hidden_layers=1) == target
    assert (target / factory.STAMP).is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["m"]


def test_sharded_checkpoint(sharded_dir):
    index = json.loads((sharded_dir / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert not (sharded_dir / "model.safetensors").exists()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"size": "huge"}, ValueError, "size must be one of tiny, small, got 'huge'"),
        (
            {"arch": "gpt2"},
            ValueError,
            "arch must be one of llama, mistral, .*qwen2, .*, got 'gpt2'",
        ),
        ({"hidden_sise": 8}, ValueError, "unknown LlamaConfig override"),
        ({"seed": "0"}, TypeError, "seed must be an int"),
        ({"path": 3}, TypeError, "path must be a str"),
    ],
)
def test_bad_settings(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_model(**kwargs)


def test_refuses_a_foreign_directory(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="already holds something other"):
        make_model(tmp_path / "m")


def test_training_lowers_the_corpus_loss_and_is_deterministic(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tandem.core.testing.train import token_stream

    base = make_model(tmp_path / "base", num_hidden_layers=1)
    trained = make_model(tmp_path / "t1", num_hidden_layers=1, train_steps=30)
    again = make_model(tmp_path / "t2", num_hidden_layers=1, train_steps=30)
    blob = "model.safetensors"
    assert (trained / blob).read_bytes() == (again / blob).read_bytes()
    stream = token_stream(AutoTokenizer.from_pretrained(base))[:257]

    def loss(path):
        model = AutoModelForCausalLM.from_pretrained(path).eval()
        with torch.no_grad():
            logits = model(input_ids=stream[None, :-1]).logits[0]
        return float(torch.nn.functional.cross_entropy(logits, stream[1:]))

    assert loss(trained) < loss(base) - 0.5


@pytest.mark.parametrize("steps", [-1, 1.5, True])
def test_bad_train_steps(tmp_path, steps):
    with pytest.raises(ValueError, match="train_steps must be an int >= 0"):
        make_model(tmp_path / "x", train_steps=steps)


def test_making_a_model_leaves_every_later_digest_as_it_was(tmp_path):
    """A process that made a model asks for the same directory afterwards as a fresh one
    does (Phi3Config added a field to the spec's own rope_parameters: a long-lived test
    process then named the default phi3 model otherwise than the ranks it started)."""

    def digests() -> str:  # as text: a dict would share what is changed in place
        return json.dumps({arch: factory.settings(arch=arch) for arch in factory.ARCHS})

    before = digests()
    make_model(tmp_path / "phi3", arch="phi3")
    for arch in factory.ARCHS:
        factory._config_class(arch)(**factory.settings(arch=arch)["config"])
    assert digests() == before
