"""Mixture-of-experts GGUF files made by llama.cpp's own converter and quantizer, and the
tiny checkpoints they are made from (for tests/models/test_gguf_moe.py).

Each source is a ``make_model`` checkpoint set to what llama.cpp can represent (every
Qwen-MoE layer sparse, Qwen3-MoE's weights renormalised, no Mixtral window, DeepSeek's rope
in interleaved pairs and its ``scoring_func`` written out, as the published checkpoints
have it). The converter runs in the llama.cpp venv (``benchmarks/llama_cpp_venv.sh``,
found at ``benchmarks/results/llama-cpp-venv`` of this checkout or of the main one of its
git worktrees, or at ``$LLAMA_CPP_VENV``), unchanged except for one thing: the tiny
tokenizer's pre-tokenizer is unknown to it (it identifies them by hashing their tokens of
a fixed text), and llama.cpp's ``gpt-2`` split is the one it uses. Files are made once and
kept under ``$TANDEM_CACHE_DIR/gguf-moe``; ``config.json`` keeps a ``tandem_model.json``
stamp beside it (make_model's), which the converter ignores.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

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

# run in the venv's python: argv = llama.cpp dir, then the converter's own arguments
_CONVERT = """
import runpy, sys
root = sys.argv[1]
sys.path[:0] = [root, root + "/gguf-py"]
from conversion import base
identify = base.TextModel.get_vocab_base_pre
def pre_tokenizer(self, tokenizer):
    try:
        return identify(self, tokenizer)
    except NotImplementedError:  # a tokenizer trained here: GPT-2's split
        return "gpt-2"
base.TextModel.get_vocab_base_pre = pre_tokenizer
sys.argv = [root + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
# argv = source, destination, ftype name (Q4_K_M, Q8_0, ...)
_QUANTIZE = """
import sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3])
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), params))
"""
# argv = file, token ids (JSON): every position's logits, float32 KV cache, one thread
_LOGITS = """
import json, sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, logits_all=True, verbose=False,
                      n_threads=1, type_k=0, type_v=0)
tokens = json.loads(sys.argv[2])
llm.eval(tokens)
print(json.dumps([list(map(float, row)) for row in llm.scores[: len(tokens)]]))
"""


def llama_cpp_venv() -> Path | None:
    """The llama.cpp venv, or None where there is none (see the module docstring)."""
    candidates = [Path(os.environ["LLAMA_CPP_VENV"])] if os.environ.get("LLAMA_CPP_VENV") else []
    candidates.append(REPO / "benchmarks" / "results" / "llama-cpp-venv")
    git = REPO / ".git"
    if git.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        gitdir = Path(git.read_text().split(":", 1)[1].strip())
        candidates.append(gitdir.parents[2] / "benchmarks" / "results" / "llama-cpp-venv")
    for venv in candidates:
        if (venv / "bin" / "python").is_file() and (_llama_dir(venv) / "gguf-py").is_dir():
            return venv
    return None


class Made:
    """``made(name, ftype="F32", **overrides)`` -> (the GGUF file, the checkpoint it was
    made from), through the llama.cpp venv ``venv``, kept under ``root``."""

    def __init__(self, venv: Path, root: Path) -> None:
        self.venv, self.root = venv, root

    def __call__(self, name: str, ftype: str = "F32", **overrides: Any) -> tuple[Path, Path]:
        hf = source(name, self.root, **overrides)
        return gguf_file(self.venv, hf, self.root, ftype), hf


def made_or_skip() -> Made:
    """For a session fixture: the files (under ``$TANDEM_CACHE_DIR/gguf-moe`` as it is
    now), or the test skipped where llama.cpp is missing."""
    import pytest

    from tandem.core import envs

    venv = llama_cpp_venv()
    if venv is None:
        pytest.skip(
            "no llama.cpp venv to convert with (make one with benchmarks/llama_cpp_venv.sh, "
            "or point $LLAMA_CPP_VENV at one)"
        )
    return Made(venv, Path(envs.TANDEM_CACHE_DIR) / "gguf-moe")


def _llama_dir(venv: Path) -> Path:
    return venv / "src" / "vendor" / "llama.cpp"


def source(name: str, root: Path, **overrides: Any) -> Path:
    """The checkpoint of source ``name`` (in ``root``); ``overrides`` change its config."""
    from tandem.core.testing import make_model

    if name not in SOURCES:
        raise ValueError(f"name must be one of {', '.join(SOURCES)}, got {name!r}")
    arch, settings, extra = SOURCES[name]
    settings = {**settings, **overrides}
    stamp = json.dumps([settings, extra], sort_keys=True)
    out = root / "sources" / f"{name}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}"
    if (out / "config.json").is_file():
        return out
    part = out.with_name(out.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    make_model(part, size="tiny", arch=arch, **settings)
    config = json.loads((part / "config.json").read_text())
    (part / "config.json").write_text(json.dumps({**config, **extra}, indent=2))
    part.rename(out)
    return out


def gguf_file(venv: Path, hf_dir: Path, root: Path, ftype: str = "F32") -> Path:
    """``hf_dir`` converted to F32 (or then quantized to ``ftype``) in ``root``, made once."""
    root.mkdir(parents=True, exist_ok=True)
    f32 = root / f"{hf_dir.name}-F32.gguf"
    if not f32.is_file():
        cmd = [str(_llama_dir(venv)), str(hf_dir), "--outtype", "f32", "--outfile", f"{f32}.part"]
        _run(venv, _CONVERT, cmd)
        os.rename(f"{f32}.part", f32)
    if ftype == "F32":
        return f32
    out = root / f"{hf_dir.name}-{ftype}.gguf"
    if not out.is_file():
        _run(venv, _QUANTIZE, [str(f32), f"{out}.part", ftype])
        os.rename(f"{out}.part", out)
    return out


def llama_cpp_logits(venv: Path, path: Path, tokens: list[int]) -> list[list[float]]:
    """llama.cpp's logits at every position of ``tokens`` run through the file ``path``."""
    return json.loads(_run(venv, _LOGITS, [str(path), json.dumps(tokens)]).splitlines()[-1])


def _run(venv: Path, script: str, args: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    cmd = [str(venv / "bin" / "python"), "-c", script, *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd[3:])} failed:\n{done.stderr[-3000:]}")
    return done.stdout
