"""A GGUF file's tokenizer is built in a child process where torch is not imported (the
v1 front's case), and the child's directory is the one built in place."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tandem.core.gguf.tokenizer import tokenizer_dir

FILES = Path(__file__).parent / "gguf_files"
SAVED = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.mark.parametrize(
    "name", ["llama-f32.gguf", pytest.param("gemma3-f32.gguf", marks=pytest.mark.slow)]
)
def test_built_in_a_child_as_in_place(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_python: Callable[[str], None]
) -> None:
    src = FILES / name
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "here"))
    assert "torch" in sys.modules  # built in this process
    here = tokenizer_dir(src)
    code = (
        "import os, sys\n"
        f"os.environ['TANDEM_CACHE_DIR'] = {str(tmp_path / 'child')!r}\n"
        "from tandem.core.gguf.tokenizer import tokenizer_dir\n"
        "from tandem.core.text.tokenizer import load_tokenizer\n"
        f"root = tokenizer_dir({str(src)!r})\n"
        "assert load_tokenizer(root).encode('Hello there')\n"
        "assert 'torch' not in sys.modules, 'the asking process imported torch'\n"
        "print(root)\n"
    )
    fresh_python(code)
    (child,) = (tmp_path / "child" / "tokenizers").iterdir()
    for file in SAVED:
        if (here / file).exists() or (child / file).exists():
            assert (child / file).read_bytes() == (here / file).read_bytes(), file


def test_a_bad_file_says_why_from_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delitem(sys.modules, "torch")  # as in the v1 front: the child builds it
    with pytest.raises(ValueError, match=r"could not read the tokenizer of .*bad\.gguf"):
        tokenizer_dir(bad)
