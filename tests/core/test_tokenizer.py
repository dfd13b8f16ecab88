from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from tandem.core.testing.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    corpus,
    is_made,
    make_tokenizer,
)
from tandem.core.text.tokenizer import Tokenizer, load_tokenizer


def test_corpus_is_varied_and_deterministic() -> None:
    lines = corpus()
    assert lines == corpus()
    assert len(lines) >= 300
    assert len(set(lines)) > 200
    text = "".join(lines)
    assert any(ord(c) > 0x3000 for c in text)  # CJK
    assert any(ord(c) > 0xFFFF for c in text)  # emoji (4-byte UTF-8)


def test_hf_loads_fast_tokenizer_that_adds_bos(tokenizer_dir: Path) -> None:
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    assert hf.is_fast
    assert len(hf) == 512
    assert (hf.unk_token_id, hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (
        UNK_ID,
        BOS_ID,
        EOS_ID,
        PAD_ID,
    )
    ids = hf.encode("Hello there")
    assert ids[0] == BOS_ID and EOS_ID not in ids
    assert hf.decode(ids, skip_special_tokens=True) == "Hello there"


def test_deterministic_byte_identical(tmp_path: Path, tokenizer_dir: Path) -> None:
    other = make_tokenizer(tmp_path / "again")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (other / name).read_bytes() == (tokenizer_dir / name).read_bytes()


@pytest.mark.slow
def test_deterministic_across_processes(tmp_path: Path, tokenizer_dir: Path) -> None:
    code = "import sys; from tandem.core.testing import tokenizer; tokenizer.make_tokenizer("
    code += "sys.argv[1])"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "p")], check=True, env=env, timeout=120
    )
    assert (tmp_path / "p" / "tokenizer.json").read_bytes() == (
        tokenizer_dir / "tokenizer.json"
    ).read_bytes()


def test_cached_when_settings_match(tmp_path: Path) -> None:
    root = make_tokenizer(tmp_path / "t", vocab_size=300)
    before = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    os.utime(root / "tokenizer.json", ns=(1, 1))  # mark: a rewrite would change it
    assert make_tokenizer(root, vocab_size=300) == root
    assert (root / "tokenizer.json").stat().st_mtime_ns == 1
    assert set(before) == {p.name for p in root.iterdir()}
    # other settings: remade
    make_tokenizer(root, vocab_size=320)
    assert (root / "tokenizer.json").stat().st_mtime_ns != 1
    assert is_made(root, 320) and not is_made(root, 300)
    assert len(json.loads((root / "tokenizer.json").read_text())["model"]["vocab"]) == 320


def test_remade_when_a_file_is_missing(tmp_path: Path) -> None:
    root = make_tokenizer(tmp_path / "t", vocab_size=300)
    (root / "tokenizer.json").unlink()
    assert not is_made(root, 300)
    make_tokenizer(root, vocab_size=300)
    assert (root / "tokenizer.json").is_file()


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"path": 3}, TypeError, "path must be a str or os.PathLike, got int"),
        ({"vocab_size": 100}, ValueError, r"vocab_size must be between 260 .* got 100"),
        ({"vocab_size": 10**6}, ValueError, "vocab_size must be between .* got 1000000"),
        ({"vocab_size": 512.0}, TypeError, "vocab_size must be an int, got float"),
    ],
)
def test_make_tokenizer_bad_input(
    tmp_path: Path, kwargs: dict[str, object], exc: type[Exception], message: str
) -> None:
    kwargs.setdefault("path", tmp_path / "t")
    with pytest.raises(exc, match=message):
        make_tokenizer(**kwargs)  # type: ignore[arg-type]


def test_make_tokenizer_on_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match=r"path must be a directory, got a file"):
        make_tokenizer(f)


def test_wrapper_round_trip(tokenizer: Tokenizer) -> None:
    text = "The cat reads 日本語 and 🙂 at the café."
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_token_id == BOS_ID
    assert tokenizer.encode(text, add_special_tokens=False) == ids[1:]
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(ids, skip_special_tokens=False).startswith("<s>")
    assert tokenizer.eos_token_id == EOS_ID and tokenizer.pad_token_id == PAD_ID
    assert tokenizer.vocab_size == len(tokenizer) == 512
    assert sorted(tokenizer.all_special_ids) == [0, 1, 2, 3]
    assert tokenizer.convert_ids_to_tokens([BOS_ID, EOS_ID]) == ["<s>", "</s>"]


def test_decode_is_concatenative(tokenizer: Tokenizer) -> None:
    """No clean-up pass: decoding parts and joining them gives the whole decode."""
    ids = tokenizer.encode("a , b . c ! don 't", add_special_tokens=False)
    assert "".join(tokenizer.decode([i]) for i in ids) == tokenizer.decode(ids)


def test_ids_past_vocab_decode_to_nothing(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("hi", add_special_tokens=False)
    assert tokenizer.decode([*ids, 10_000]) == "hi"


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [
        (lambda t: t.encode(b"x"), TypeError, "text must be a str, got bytes"),
        (lambda t: t.decode("abc"), TypeError, "ids must be a sequence of ints, got str"),
        (lambda t: t.decode([1.0]), TypeError, "ids must be ints, got float"),
        (lambda t: t.decode([-1]), ValueError, "token ids must be >= 0, got -1"),
        (lambda t: t.convert_ids_to_tokens([True]), TypeError, "ids must be ints, got bool"),
    ],
)
def test_wrapper_bad_input(tokenizer: Tokenizer, call, exc: type[Exception], message: str) -> None:
    with pytest.raises(exc, match=message):
        call(tokenizer)


def test_wrapper_rejects_non_tokenizer() -> None:
    with pytest.raises(TypeError, match=r"hf_tokenizer must be a transformers tokenizer"):
        Tokenizer(object())


def test_load_tokenizer_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tokenizer directory does not exist"):
        load_tokenizer(tmp_path / "nope")
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ValueError, match=r"tokenizer path must be a directory, got a file"):
        load_tokenizer(f)
    with pytest.raises(ValueError, match=r"no tokenizer found in .*expected one of tokenizer.json"):
        load_tokenizer(tmp_path)
    with pytest.raises(TypeError, match=r"tokenizer path must be a str or os.PathLike, got int"):
        load_tokenizer(5)  # type: ignore[arg-type]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"could not load the tokenizer in"):
        load_tokenizer(bad)


# -- the model-config stand-in (start-up) --------------------------------------------------

SAMPLES = ("Hello there", "  spaced  out\n", "日本語 and emoji 🙂", "")


def _same_tokenizer(got: Tokenizer, want: Any) -> None:
    assert type(got.hf) is type(want)
    assert len(got.hf) == len(want)
    assert got.all_special_ids == list(want.all_special_ids)
    assert (got.bos_token_id, got.eos_token_id, got.pad_token_id) == (
        want.bos_token_id,
        want.eos_token_id,
        want.pad_token_id,
    )
    for text in SAMPLES:
        for special in (True, False):
            assert got.encode(text, special) == list(want.encode(text, add_special_tokens=special))


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
@pytest.mark.parametrize(
    "tokenizer_class", ["PreTrainedTokenizerFast", "LlamaTokenizerFast", "Qwen2TokenizerFast"]
)
def test_load_tokenizer_picks_what_autotokenizer_picks(
    tmp_path: Path, tokenizer_dir: Path, model_type: str, tokenizer_class: str
) -> None:
    """load_tokenizer takes the class (and gives the ids) AutoTokenizer gives when it
    reads config.json itself."""
    root = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, root)
    config = json.loads((root / "tokenizer_config.json").read_text())
    (root / "tokenizer_config.json").write_text(
        json.dumps({**config, "tokenizer_class": tokenizer_class})
    )
    (root / "config.json").write_text(json.dumps({"model_type": model_type}))
    try:
        want = AutoTokenizer.from_pretrained(str(root), local_files_only=True)
    except Exception as exc:  # then load_tokenizer refuses it too
        with pytest.raises(ValueError, match="could not load the tokenizer"):
            load_tokenizer(root)
        assert exc is not None
        return
    _same_tokenizer(load_tokenizer(root), want)


@pytest.mark.slow
def test_load_tokenizer_on_smollm2_is_autotokenizers(smollm2: Path) -> None:
    got = load_tokenizer(smollm2)
    _same_tokenizer(got, AutoTokenizer.from_pretrained(str(smollm2), local_files_only=True))
    chat = [{"role": "user", "content": "Hi!"}]
    want = AutoTokenizer.from_pretrained(str(smollm2), local_files_only=True)
    assert got.hf.apply_chat_template(chat, tokenize=False) == want.apply_chat_template(
        chat, tokenize=False
    )


def test_load_tokenizer_leaves_the_model_config_classes_unloaded(
    tmp_path: Path, tokenizer_dir: Path, fresh_python
) -> None:
    root = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, root)
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    code = (
        "import sys\n"
        "from tandem.core.text.tokenizer import load_tokenizer\n"
        f"load_tokenizer({str(root)!r})\n"
        "loaded = [m for m in sys.modules if m.startswith('transformers.models.llama')]\n"
        "assert not loaded, loaded\n"
    )
    fresh_python(code)
