"""The tokenizer class chosen without AutoTokenizer is AutoTokenizer's, for every
supported model type and the class names checkpoints give."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer
from transformers.models.auto.tokenization_auto import (
    MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS,
    TOKENIZER_MAPPING_NAMES,
)

from tandem.core.config.hf_defaults import DEFAULTS
from tandem.core.text.hf_tokenizer import REGISTERED, load_hf_tokenizer, tokenizer_class

SAMPLES = ("Hello there", "  spaced  out\n", "日本語 and emoji 🙂", "")
CLASSES = (
    "PreTrainedTokenizerFast",
    "TokenizersBackend",
    "LlamaTokenizerFast",
    "LlamaTokenizer",
    "Qwen2TokenizerFast",
    "GPT2TokenizerFast",
    "GemmaTokenizerFast",
)
METASPACE = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}


@pytest.mark.parametrize("model_type", sorted(set(REGISTERED) - {""}))
def test_registered_is_transformers_table(model_type: str) -> None:
    want = (
        TOKENIZER_MAPPING_NAMES.get(model_type),
        model_type in MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS,
    )
    assert REGISTERED[model_type] == want


def test_every_supported_model_type_is_registered() -> None:
    assert {d["model_type"] for d in DEFAULTS.values()} <= set(REGISTERED)


def _directory(
    tmp_path: Path, source: Path, named: str | None, model_type: str | None, vocab: str
) -> Path:
    root = tmp_path / "tok"
    shutil.copytree(source, root)
    config = json.loads((root / "tokenizer_config.json").read_text())
    if named is not None:
        config["tokenizer_class"] = named
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    if model_type is not None:
        (root / "config.json").write_text(json.dumps({"model_type": model_type}))
    if vocab == "metaspace":
        tok = json.loads((root / "tokenizer.json").read_text())
        tok["pre_tokenizer"], tok["decoder"] = METASPACE, METASPACE
        (root / "tokenizer.json").write_text(json.dumps(tok))
    return root


def _same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    assert len(got) == len(want)
    assert list(got.all_special_ids) == list(want.all_special_ids)
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "chat_template"):
        assert getattr(got, attr) == getattr(want, attr), attr
    for text in SAMPLES:
        for special in (True, False):
            assert got.encode(text, add_special_tokens=special) == want.encode(
                text, add_special_tokens=special
            )
        assert got.decode(got.encode(text)) == want.decode(want.encode(text))


@pytest.mark.parametrize("vocab", ["byte_level", "metaspace"])
@pytest.mark.parametrize("named", CLASSES)
@pytest.mark.parametrize("model_type", sorted(REGISTERED))
def test_class_is_autotokenizers(
    tmp_path: Path, tokenizer_dir: Path, model_type: str, named: str, vocab: str
) -> None:
    root = _directory(tmp_path, tokenizer_dir, named, model_type or None, vocab)
    chosen = tokenizer_class(root)
    assert chosen is not None  # the choice is made here, not by AutoTokenizer
    try:
        want = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
    except Exception:  # then building the chosen class fails too
        with pytest.raises(Exception):  # noqa: B017 - whatever transformers raises
            load_hf_tokenizer(root)
        return
    assert chosen is type(want)
    _same(load_hf_tokenizer(root), want)


@pytest.mark.slow
def test_gguf_tokenizer_is_autotokenizers(smollm2_gguf: Path) -> None:
    """The directory made from a GGUF file's vocabulary (no config.json)."""
    from tandem.core.gguf.tokenizer import tokenizer_dir

    root = tokenizer_dir(smollm2_gguf)
    assert not (root / "config.json").exists()
    assert tokenizer_class(root) is not None
    want = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
    got = load_hf_tokenizer(root)
    _same(got, want)
    chat = [{"role": "user", "content": "Hi!"}]
    assert got.apply_chat_template(chat, tokenize=False) == want.apply_chat_template(
        chat, tokenize=False
    )


@pytest.mark.parametrize(
    "change",
    ["auto_map", "no_class", "unknown_model_type", "no_tokenizer_json", "model_name"],
)
def test_left_to_autotokenizer(tmp_path: Path, tokenizer_dir: Path, change: str) -> None:
    """Where the choice is not plain, AutoTokenizer makes it (and still loads it)."""
    model_type = "mamba" if change == "unknown_model_type" else "llama"
    root = _directory(tmp_path, tokenizer_dir, None, model_type, "byte_level")
    config = json.loads((root / "tokenizer_config.json").read_text())
    if change == "auto_map":
        config["auto_map"] = {"AutoTokenizer": [None, "PreTrainedTokenizerFast"]}
    if change == "no_class":
        config.pop("tokenizer_class")
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    if change == "model_name":
        (root / "config.json").write_text(json.dumps({"model_type": "llama", "model_name": "x"}))
    if change == "no_tokenizer_json":
        (root / "tokenizer.json").unlink()
    assert tokenizer_class(root) is None
    if change != "no_tokenizer_json" and change != "auto_map":
        want = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
        _same(load_hf_tokenizer(root), want)
