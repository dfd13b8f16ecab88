"""The light tokenizer (no transformers) encodes, decodes and renders chat templates
exactly as transformers' tokenizer of the same directory, for every tokenizer the suite
makes and the real default model's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_hf_tokenizer import CLASSES, _directory
from transformers import AutoTokenizer, TokenizersBackend

from tandem.core.text.chat_template import render_chat
from tandem.core.text.hf_tokenizer import REGISTERED, load_hf_tokenizer
from tandem.core.text.light_tokenizer import (
    BACKEND,
    DECODER,
    META,
    LightTokenizer,
    light_tokenizer,
    resolve,
    resolved_dir,
)
from tandem.core.text.tokenizer import Tokenizer, load_tokenizer

SAMPLES = (
    "Hello there",
    "  spaced  out\n",
    "日本語 and emoji 🙂",
    "",
    "<s> inline </s> specials <pad><unk>",
    " leading space. Trailing , punctuation !",
)
CHATS = (
    [{"role": "user", "content": "Hi!"}],
    [
        {"role": "system", "content": "Be brief. «quoted» <b>&</b>"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4", "reasoning": "add them", "tool_calls": None},
        {"role": "user", "content": "日本語 🙂"},
    ],
)
TOOLS = [
    {
        "type": "function",
        "function": {"name": "add", "description": "añadir «x» <y>", "parameters": {}},
    }
]
# a template reaching for every helper and every piece of data transformers hands one
RICH_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(n=0) %}"
    "{% if tools %}tools={{ tools | tojson }}\n{% endif %}"
    "{% if documents %}docs={{ documents | tojson(indent=2) }}\n{% endif %}"
    "{% for m in messages %}"
    "  {% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}\n"
    "{% set ns.n = ns.n + 1 %}{% if loop.index > 9 %}{% break %}{% endif %}"
    "<{{ m['role'] }}>{% if m.tool_calls is defined %}calls{% endif %}"
    "{% if m.reasoning_content %}[{{ m.reasoning_content }}|"
    "{{ m.thinking }}]{% endif %}"
    "{% generation %}{{ m['content'] | trim }}{% endgeneration %}{{ eos_token }}\n"
    "{% endfor %}{{ strftime_now('%Y') }}{{ dict(a=1) | tojson }}{{ ns.n }}"
    "{{ pad_token }}{{ unk_token }}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def _light(root: Path, tmp_path: Path) -> LightTokenizer | None:
    """The light tokenizer of ``root``, resolved in this process (the child that
    :func:`light_tokenizer` runs calls the same :func:`resolve`)."""
    out = tmp_path / "light"
    out.mkdir()
    resolve(root, out)
    meta = json.loads((out / META).read_text())
    if not meta["supported"]:
        return None
    from tokenizers import Tokenizer as Backend

    return LightTokenizer(Backend.from_file(str(out / BACKEND)), meta, out / DECODER)


def _meta(light: LightTokenizer) -> dict[str, Any]:
    return {
        "len": len(light),
        "bos_token_id": light.bos_token_id,
        "eos_token_id": light.eos_token_id,
        "pad_token_id": light.pad_token_id,
        "all_special_ids": light.all_special_ids,
        "special_tokens_map": light.special_tokens_map,
        "chat_template": light.chat_template,
        "split_special_tokens": light.backend_tokenizer.encode_special_tokens,
    }


def _same(light: LightTokenizer, hf: Any, root: Path) -> None:
    got, want = Tokenizer(light, path=root), Tokenizer(hf, path=root)
    assert (got.vocab_size, got.all_special_ids) == (want.vocab_size, want.all_special_ids)
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "chat_template"):
        assert getattr(got, attr) == getattr(want, attr), attr
    every = list(range(want.vocab_size + 3))  # a few past the vocabulary too
    assert got.convert_ids_to_tokens(every) == want.convert_ids_to_tokens(every)
    for skip in (True, False):
        assert got.decode(every, skip) == want.decode(every, skip)
        singles = every if len(every) < 5000 else every[::17] + want.all_special_ids
        for i in singles:
            assert got.decode([i], skip) == want.decode([i], skip), i
    for text in SAMPLES:
        for special in (True, False):
            ids = want.encode(text, add_special_tokens=special)
            assert got.encode(text, add_special_tokens=special) == ids, text
            for skip in (True, False):
                assert got.decode(ids, skip) == want.decode(ids, skip)
    assert light.get_vocab() == hf.get_vocab()
    # what the detokenizer is sent: kept when resolved, or made again from the backend
    assert got.decoder_json() == want.decoder_json()
    made = LightTokenizer(light.backend_tokenizer, _meta(light), decoder=None)
    assert made.decoder_json() == want.decoder_json()
    if want.has_chat_template:
        for chat in CHATS:
            for prompt in (True, False):
                assert got.apply_chat_template(chat, prompt) == want.apply_chat_template(
                    chat, prompt
                )
                assert got.apply_chat_template(chat, prompt, TOOLS) == want.apply_chat_template(
                    chat, prompt, TOOLS
                )


@pytest.mark.parametrize("vocab", ["byte_level", "metaspace"])
@pytest.mark.parametrize("named", CLASSES)
@pytest.mark.parametrize("model_type", sorted(REGISTERED))
def test_light_is_transformers(
    tmp_path: Path, tokenizer_dir: Path, model_type: str, named: str, vocab: str
) -> None:
    root = _directory(tmp_path, tokenizer_dir, named, model_type or None, vocab)
    try:
        hf = load_hf_tokenizer(root)
    except Exception:  # then the light form is not made either
        with pytest.raises(Exception):  # noqa: B017 - whatever transformers raises
            _light(root, tmp_path)
        return
    light = _light(root, tmp_path)
    if light is None:  # left to transformers: only a class with calls of its own
        assert type(hf) is not TokenizersBackend
        return
    _same(light, hf, root)


@pytest.mark.parametrize("add_bos", [True, False, None])
@pytest.mark.parametrize("add_eos", [True, False, None])
def test_bos_eos_flags(tmp_path: Path, tokenizer_dir: Path, add_bos: Any, add_eos: Any) -> None:
    """add_bos_token/add_eos_token given, absent, or the post-processor dropped."""
    root = _directory(tmp_path, tokenizer_dir, "TokenizersBackend", "llama", "byte_level")
    config = json.loads((root / "tokenizer_config.json").read_text())
    for key, value in (("add_bos_token", add_bos), ("add_eos_token", add_eos)):
        config.pop(key, None) if value is None else config.__setitem__(key, value)
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    if add_bos is None and add_eos is None:
        tok = json.loads((root / "tokenizer.json").read_text())
        tok["post_processor"] = None
        (root / "tokenizer.json").write_text(json.dumps(tok))
    light, hf = _light(root, tmp_path), load_hf_tokenizer(root)
    assert light is not None
    _same(light, hf, root)


def test_rich_template_is_transformers(tmp_path: Path, tokenizer_dir: Path) -> None:
    root = _directory(tmp_path, tokenizer_dir, None, "llama", "byte_level")
    hf = load_hf_tokenizer(root)
    hf.chat_template = RICH_TEMPLATE
    light = _light(root, tmp_path)
    assert light is not None
    light.chat_template = RICH_TEMPLATE
    docs = [{"title": "t", "text": "x < y"}]
    for chat in CHATS:
        for prompt in (True, False):
            for extra in ({}, {"tools": TOOLS}, {"documents": docs}):
                want = hf.apply_chat_template(
                    chat, add_generation_prompt=prompt, tokenize=False, **extra
                )
                assert light.apply_chat_template(chat, prompt, tokenize=False, **extra) == want
    with pytest.raises(Exception, match="no tools here"):
        light.apply_chat_template([{"role": "tool", "content": "x"}])
    with pytest.raises(Exception, match="underscore"):
        render_chat("{% set ns = namespace(_x=1) %}", CHATS[0], add_generation_prompt=False)
    with pytest.raises(Exception, match=r"unsafe|not safely|access"):
        render_chat(
            "{{ messages.__class__ }}{{ ''.__class__.__mro__ }}", [], add_generation_prompt=False
        )


def test_unsupported_is_left_to_transformers(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Several named templates (a dict) are not taken by the light path."""
    root = _directory(tmp_path, tokenizer_dir, None, "llama", "byte_level")
    config = json.loads((root / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": "{{ messages[0].content }}"},
        {"name": "tool_use", "template": "{{ tools }}"},
    ]
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    assert _light(root, tmp_path) is None


def test_load_tokenizer_light_without_transformers(tokenizer_dir: Path, tmp_path: Path) -> None:
    """The whole path, child process included, in a process that never imports it."""
    code = (
        "import sys\n"
        "from tandem.core.text.tokenizer import load_tokenizer\n"
        f"tok = load_tokenizer({str(tokenizer_dir)!r}, light_cache={str(tmp_path)!r})\n"
        "assert type(tok.hf).__name__ == 'LightTokenizer', type(tok.hf)\n"
        "hi = [{'role': 'user', 'content': 'Hi'}]\n"
        "print(tok.encode('Hello there'), tok.apply_chat_template(hi))\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('transformers', 'numpy', 'torch')]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    want = load_tokenizer(tokenizer_dir)
    hi = [{"role": "user", "content": "Hi"}]
    assert done.stdout.strip() == f"{want.encode('Hello there')} {want.apply_chat_template(hi)}"


@pytest.mark.slow
def test_gguf_tokenizer_light_is_transformers(smollm2_gguf: Path, tmp_path: Path) -> None:
    """The real default model's vocabulary (49k byte-level BPE, ChatML template)."""
    from tandem.core.gguf.tokenizer import tokenizer_dir

    root = tokenizer_dir(smollm2_gguf)
    light = _light(root, tmp_path)
    assert light is not None
    _same(light, AutoTokenizer.from_pretrained(str(root), local_files_only=True), root)
    assert type(load_tokenizer(root, light_cache=tmp_path / "c").hf) is LightTokenizer
    assert light_tokenizer(root, tmp_path / "c") is not None


def test_an_unwritable_cache_falls_back(tokenizer_dir: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    tok = load_tokenizer(tokenizer_dir, light_cache=blocked / "cache")
    assert type(tok.hf) is not LightTokenizer
    assert tok.encode("Hello there") == load_tokenizer(tokenizer_dir).encode("Hello there")


def test_the_resolved_form_is_keyed_by_content(tokenizer_dir: Path, tmp_path: Path) -> None:
    """A copy of a directory elsewhere finds the same entry; a changed file another."""
    import shutil

    cache = tmp_path / "cache"
    first = resolved_dir(tokenizer_dir, cache)
    copy = shutil.copytree(tokenizer_dir, tmp_path / "copy")
    assert first is not None and resolved_dir(copy, cache) == first
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ messages[0]['content'] }}"
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    changed = resolved_dir(copy, cache)
    assert changed is not None and changed != first
    assert json.loads((changed / META).read_text())["chat_template"] == config["chat_template"]
