"""Mixture-of-experts GGUF files made by llama.cpp's own converter and quantizer, and the
tiny checkpoints they are made from (for tests/models/test_gguf_moe*.py).

Each source is a ``make_model`` checkpoint set to what llama.cpp can represent (every
Qwen-MoE layer sparse, Qwen3-MoE's weights renormalised, no Mixtral window, DeepSeek's rope
in interleaved pairs and its ``scoring_func`` written out, as the published checkpoints
have it). The tools are llama.cpp's (:mod:`tandem.core.testing.llama_cpp`): the converter
alone makes the F32 files; a test that needs a quantized file or llama.cpp's logits skips
where llama.cpp is not compiled.
Files are made once and kept under ``$TANDEM_CACHE_DIR/gguf-moe`` (as it is when the
session's fixture is made).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from tandem.core.testing import llama_cpp

REPO = Path(__file__).resolve().parents[2]
# name -> (make_model arch, its overrides, config.json fields only llama.cpp's converter reads)
SOURCES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "mixtral": ("mixtral", {"sliding_window": None}, {}),
    "qwen2_moe": ("qwen2_moe", {"decoder_sparse_step": 1}, {}),
    "qwen3_moe": ("qwen3_moe", {"mlp_only_layers": []}, {}),
    "deepseek_v3": ("deepseek_v3", {}, {"scoring_func": "sigmoid"}),
    # q straight from the hidden state, one group, weights unnormalised, two shared experts;
    # 27 layers: llama.cpp takes a file without q_lora_rank only at DeepSeek-V2-Lite's depth
    "deepseek_v3_plain": (
        "deepseek_v3_plain",
        {"rope_interleave": True, "attention_bias": False, "num_hidden_layers": 27},
        {"scoring_func": "sigmoid"},
    ),
}


class Made:
    """``made(name, ftype="F32", **overrides)`` -> (the GGUF file, the checkpoint it was
    made from), through llama.cpp's ``tools``, kept under ``root``."""

    def __init__(self, tools: llama_cpp.Tools, root: Path) -> None:
        self.tools, self.root = tools, root

    def need(self, tool: str) -> None:
        """Skips the test where llama.cpp's ``tool`` (``quantize``, ``logits``) cannot run."""
        import pytest

        reason = self.tools.lacks(tool)
        if reason:
            pytest.skip(reason)

    def __call__(self, name: str, ftype: str = "F32", **overrides: Any) -> tuple[Path, Path]:
        if ftype != "F32":
            self.need("quantize")
        hf = source(name, self.root, **overrides)
        self.root.mkdir(parents=True, exist_ok=True)
        f32 = self.root / f"{hf.name}-F32.gguf"
        if not f32.is_file():
            llama_cpp.convert(self.tools, hf, f32)
        if ftype == "F32":
            return f32, hf
        out = self.root / f"{hf.name}-{ftype}.gguf"
        if not out.is_file():
            llama_cpp.quantize(self.tools, f32, out, ftype)
        return out, hf

    def logits(self, path: Path, tokens: list[int]) -> list[list[float]]:
        self.need("logits")
        return llama_cpp.logits(self.tools, path, tokens)


def made_or_skip() -> Made:
    """For a session fixture: the files, or the test skipped where llama.cpp's converter is
    missing (a test that needs more of llama.cpp skips when it asks, :meth:`Made.need`)."""
    import pytest

    from tandem.core import envs

    tools = llama_cpp.find_tools(REPO)
    if tools is None:
        env = os.environ.get("LLAMA_CPP_VENV")
        lacks = f" ($LLAMA_CPP_VENV lacks {', '.join(llama_cpp.missing(env))})" if env else ""
        pytest.skip(
            f"no llama.cpp converter{lacks}: unpack it with benchmarks/llama_cpp_converter.sh "
            "(a minute), or make the compiled venv with benchmarks/llama_cpp_venv.sh, or point "
            "$LLAMA_CPP_VENV at either"
        )
    return Made(tools, Path(envs.TANDEM_CACHE_DIR) / "gguf-moe")


def source(name: str, root: Path, **overrides: Any) -> Path:
    """The checkpoint of source ``name`` (in ``root``); ``overrides`` change its config.
    Its ``config.json`` gains the source's extra fields; make_model's stamp file stays
    beside it (the converter ignores it)."""
    from tandem.core.testing import make_model

    if name not in SOURCES:
        raise ValueError(f"name must be one of {', '.join(SOURCES)}, got {name!r}")
    arch, settings, extra = SOURCES[name]
    settings = {**settings, **overrides}
    stamp = json.dumps([settings, extra], sort_keys=True)
    out = root / "sources" / f"{name}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}"
    if (out / "config.json").is_file():
        return out
    part = out.with_name(f"{out.name}.{os.getpid()}.part")  # this process's own
    shutil.rmtree(part, ignore_errors=True)
    make_model(part, size="tiny", arch=arch, **settings)
    config = json.loads((part / "config.json").read_text())
    (part / "config.json").write_text(json.dumps({**config, **extra}, indent=2))
    try:
        part.rename(out)
    except OSError:  # another process put the same checkpoint there first
        shutil.rmtree(part, ignore_errors=True)
        if not (out / "config.json").is_file():
            raise
    return out
