"""``made_or_skip``: the MoE GGUF tests skip, saying what is missing and how to get it,
where llama.cpp's converter is missing, and where one needs more than the converter (a
quantized file, llama.cpp's logits) and llama.cpp is not compiled."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.core.testing import llama_cpp

from . import gguf_moe_files


def _converter_only(root: Path) -> Path:
    for name in llama_cpp.CONVERTER_FILES:
        (root / llama_cpp.SOURCE / name).parent.mkdir(parents=True, exist_ok=True)
        (root / llama_cpp.SOURCE / name).write_text("")
    (root / llama_cpp.SITE / "sentencepiece").mkdir(parents=True)
    return root


def test_no_converter_skips_saying_how_to_get_one(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gguf_moe_files, "REPO", tmp_path / "checkout")
    monkeypatch.setenv("LLAMA_CPP_VENV", str(tmp_path / "nowhere"))
    with pytest.raises(pytest.skip.Exception) as skipped:
        gguf_moe_files.made_or_skip()
    reason = str(skipped.value)
    assert reason.startswith("no llama.cpp converter ($LLAMA_CPP_VENV lacks src/vendor/")
    assert "benchmarks/llama_cpp_converter.sh" in reason
    assert "benchmarks/llama_cpp_venv.sh" in reason


def test_a_converter_only_directory_skips_quantized_files_and_logits(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gguf_moe_files, "REPO", tmp_path / "checkout")
    monkeypatch.setenv("LLAMA_CPP_VENV", str(_converter_only(tmp_path / "c")))
    made = gguf_moe_files.made_or_skip()
    assert made.tools.root == tmp_path / "c" and not made.tools.compiled
    made.need("convert")  # runs
    made.root = tmp_path / "files"
    with pytest.raises(pytest.skip.Exception, match=r"quantizer needs llama\.cpp compiled"):
        made("qwen3_moe", "Q8_0")
    assert not made.root.exists()  # skipped before making anything
    with pytest.raises(pytest.skip.Exception, match=r"logits need llama\.cpp compiled"):
        made.logits(tmp_path / "any.gguf", [1, 2])
