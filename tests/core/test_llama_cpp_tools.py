"""Finding llama.cpp's tools (:mod:`tandem.core.testing.llama_cpp`): a compiled venv runs
all three, a converter-only directory the converter alone, in this process's python (with
the directory's ``site`` before its own packages); a directory that lacks a piece of the
converter is none."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from tandem.core.testing import llama_cpp

REPO = Path(__file__).resolve().parents[2]
# a stand-in converter: writes the python that ran it and its arguments to --outfile
FAKE_CONVERT = """
import json, sys
from conversion import base
args = sys.argv[1:]
pre = base.TextModel().get_vocab_base_pre(None)
with open(args[args.index("--outfile") + 1], "w") as f:
    site = [p for p in sys.path if p.endswith("site")]
    json.dump({"python": sys.executable, "args": args, "pre": pre, "site": site}, f)
"""
FAKE_BASE = """
class TextModel:
    def get_vocab_base_pre(self, tokenizer):
        raise NotImplementedError
"""


def converter_dir(root: Path, skip: str | None = None, site: bool = True) -> Path:
    """A converter-only directory at ``root`` (without the piece ``skip``), with
    sentencepiece in its ``site`` where ``site``."""
    texts = {"convert_hf_to_gguf.py": FAKE_CONVERT, "conversion/base.py": FAKE_BASE}
    for name in llama_cpp.CONVERTER_FILES:
        if name != skip:
            path = root / llama_cpp.SOURCE / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(texts.get(name, ""))
    if site:
        (root / llama_cpp.SITE / "sentencepiece").mkdir(parents=True)
    return root


def _sentencepiece(monkeypatch, installed: bool) -> None:
    """This python with or without sentencepiece, as :func:`llama_cpp.missing` sees it."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (
            (find_spec("json") if installed else None)
            if name == "sentencepiece"
            else find_spec(name, *a)
        ),
    )


def venv_dir(root: Path, compiled: bool = True) -> Path:
    """A llama.cpp venv at ``root``: the converter, ``bin/python``, and llama.cpp's library
    where ``compiled``."""
    converter_dir(root, site=False)
    (root / "bin").mkdir()
    (root / "bin" / "python").write_text("")
    if compiled:
        lib = root / "lib" / "python3.11" / "site-packages" / "llama_cpp" / "lib"
        lib.mkdir(parents=True)
        (lib / "libllama.so").write_text("")
    return root


def test_a_converter_only_directory_converts_in_this_python(tmp_path) -> None:
    tools = llama_cpp.tools_at(converter_dir(tmp_path / "c"))
    site = (tmp_path / "c" / "site",)
    assert tools == llama_cpp.Tools(tmp_path / "c", Path(sys.executable), False, site)
    assert tools.source == tmp_path / "c" / "src" / "vendor" / "llama.cpp"
    assert tools.lacks("convert") is None
    for tool in ("quantize", "logits"):
        reason = tools.lacks(tool)
        assert "compiled" in reason and "benchmarks/llama_cpp_venv.sh" in reason, reason
        assert str(tmp_path / "c") in reason
        with pytest.raises(llama_cpp.NotCompiled, match="holds its converter only"):
            tools.need(tool)


def test_a_compiled_venv_runs_every_tool_in_its_own_python(tmp_path) -> None:
    tools = llama_cpp.tools_at(venv_dir(tmp_path / "v"))
    assert tools == llama_cpp.Tools(tmp_path / "v", tmp_path / "v" / "bin" / "python", True)
    assert tools.path == ()  # the venv's python has its own sentencepiece
    assert all(tools.lacks(t) is None for t in ("convert", "quantize", "logits"))
    half = llama_cpp.tools_at(venv_dir(tmp_path / "half", compiled=False))
    assert half.python == tmp_path / "half" / "bin" / "python" and not half.compiled
    with pytest.raises(ValueError, match="tool must be convert, quantize or logits"):
        tools.lacks("tokenize")


@pytest.mark.parametrize("skip", llama_cpp.CONVERTER_FILES)
def test_a_directory_without_a_piece_of_the_converter_is_none(tmp_path, monkeypatch, skip):
    _sentencepiece(monkeypatch, installed=False)
    root = converter_dir(tmp_path / "c", skip=skip)
    assert llama_cpp.tools_at(root) is None
    assert llama_cpp.missing(root) == [str(llama_cpp.SOURCE / skip)]
    assert llama_cpp.tools_at(tmp_path / "nowhere") is None
    assert len(llama_cpp.missing(tmp_path / "nowhere")) == len(llama_cpp.CONVERTER_FILES) + 1
    with pytest.raises(FileNotFoundError, match=re.escape(str(llama_cpp.SOURCE / skip))):
        llama_cpp.convert(root, tmp_path / "hf", tmp_path / "out.gguf")


def test_a_converter_only_directory_needs_sentencepiece_where_this_python_lacks_it(
    tmp_path, monkeypatch
) -> None:
    root = converter_dir(tmp_path / "c", site=False)
    _sentencepiece(monkeypatch, installed=False)
    assert llama_cpp.missing(root) == [str(llama_cpp.SITE / "sentencepiece")]
    assert llama_cpp.tools_at(root) is None
    _sentencepiece(monkeypatch, installed=True)
    assert llama_cpp.missing(root) == []
    assert llama_cpp.tools_at(root).path == ()  # nothing put before this python's packages


def _checkout(root: Path, venv: bool, converter: bool, compiled: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if venv:
        venv_dir(root / llama_cpp.VENV_DIR, compiled)
    if converter:
        converter_dir(root / llama_cpp.CONVERTER_DIR)
    return root


def test_find_tools_prefers_llama_cpp_compiled(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LLAMA_CPP_VENV", raising=False)
    assert llama_cpp.find_tools(_checkout(tmp_path / "none", False, False)) is None
    both = _checkout(tmp_path / "both", True, True)
    assert llama_cpp.find_tools(both).root == both / llama_cpp.VENV_DIR
    half = _checkout(tmp_path / "half", True, True, compiled=False)
    assert llama_cpp.find_tools(half).root == half / llama_cpp.VENV_DIR  # the first
    only = _checkout(tmp_path / "only", False, True)
    assert llama_cpp.find_tools(only) == llama_cpp.tools_at(only / llama_cpp.CONVERTER_DIR)


def test_find_tools_takes_llama_cpp_venv_of_either_kind(tmp_path, monkeypatch) -> None:
    both = _checkout(tmp_path / "both", True, True)
    monkeypatch.setenv("LLAMA_CPP_VENV", str(converter_dir(tmp_path / "c")))
    assert llama_cpp.find_tools(both).root == tmp_path / "c"  # chosen, though not compiled
    monkeypatch.setenv("LLAMA_CPP_VENV", str(venv_dir(tmp_path / "v")))
    assert llama_cpp.find_tools(_checkout(tmp_path / "none", False, False)).root == tmp_path / "v"
    monkeypatch.setenv("LLAMA_CPP_VENV", str(tmp_path / "nowhere"))  # looks on
    assert llama_cpp.find_tools(both).root == both / llama_cpp.VENV_DIR
    assert llama_cpp.find_tools(tmp_path / "none") is None


def test_a_worktree_finds_its_main_checkouts_tools(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("LLAMA_CPP_VENV", raising=False)
    main = _checkout(tmp_path / "main", False, True)
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    assert llama_cpp.find_tools(worktree).root == main / llama_cpp.CONVERTER_DIR
    _checkout(worktree, True, False, compiled=True)  # its own compiled venv comes first
    assert llama_cpp.find_tools(worktree).root == worktree / llama_cpp.VENV_DIR


def test_convert_runs_the_converter_in_this_python_and_quantize_refuses(tmp_path) -> None:
    tools = llama_cpp.tools_at(converter_dir(tmp_path / "c"))
    out = llama_cpp.convert(tools, tmp_path / "hf", tmp_path / "out.gguf", "f16")
    ran = json.loads(out.read_text())
    assert Path(ran["python"]).resolve() == Path(sys.executable).resolve()
    assert ran["args"][:3] == [str(tmp_path / "hf"), "--outtype", "f16"]
    assert ran["pre"] == "gpt-2"  # a pre-tokenizer llama.cpp does not know: GPT-2's split
    assert ran["site"] == [str(tmp_path / "c" / "site")]
    assert not list(tmp_path.glob("*.part"))
    with pytest.raises(llama_cpp.NotCompiled, match=r"quantizer needs llama\.cpp compiled"):
        llama_cpp.quantize(tools, out, tmp_path / "q.gguf", "Q8_0")
    with pytest.raises(llama_cpp.NotCompiled, match=r"logits need llama\.cpp compiled"):
        llama_cpp.logits(tmp_path / "c", out, [1, 2])
    assert not (tmp_path / "q.gguf").exists()


def test_both_scripts_fetch_the_same_llama_cpp_python() -> None:
    pins = {
        name: re.findall(r"LLAMA_CPP_PYTHON_VERSION:-([0-9.]+)", (REPO / name).read_text())
        for name in ("benchmarks/llama_cpp_venv.sh", "benchmarks/llama_cpp_converter.sh")
    }
    assert len({tuple(p) for p in pins.values()}) == 1 and all(pins.values()), pins
