"""llama.cpp's own tools run on checkpoints made here: its converter, its quantizer, and
its logits, in the llama.cpp venv that ``benchmarks/llama_cpp_venv.sh`` builds.

Each runs in that venv's python (its own torch, transformers and ``llama_cpp``). The
converter runs unchanged but for one thing: it names a BPE tokenizer's pre-tokenizer by
hashing its tokens of a fixed text, and a tokenizer trained here (``make_tokenizer``) has
no known hash; where (and only where) the hash is unknown, llama.cpp's ``gpt-2`` split is
used, which is the test tokenizer's (GPT-2's regex, no prefix space).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

VENV_DIR = Path("benchmarks") / "results" / "llama-cpp-venv"

# argv = llama.cpp dir, then the converter's own arguments
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
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=max(64, len(json.loads(sys.argv[2]))),
                      logits_all=True, verbose=False, n_threads=1, type_k=0, type_v=0)
tokens = json.loads(sys.argv[2])
llm.eval(tokens)
print(json.dumps([list(map(float, row)) for row in llm.scores[: len(tokens)]]))
"""


def find_venv(repo: str | os.PathLike[str]) -> Path | None:
    """The llama.cpp venv: ``$LLAMA_CPP_VENV``, else ``benchmarks/results/llama-cpp-venv``
    of checkout ``repo`` or, for a git worktree, of its main checkout; None if none."""
    root = Path(repo)
    candidates = [Path(os.environ["LLAMA_CPP_VENV"])] if os.environ.get("LLAMA_CPP_VENV") else []
    candidates.append(root / VENV_DIR)
    git = root / ".git"
    if git.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        gitdir = Path(git.read_text().split(":", 1)[1].strip())
        candidates.append(gitdir.parents[2] / VENV_DIR)
    for venv in candidates:
        if (venv / "bin" / "python").is_file() and (_llama_dir(venv) / "gguf-py").is_dir():
            return venv
    return None


def _llama_dir(venv: Path) -> Path:
    return venv / "src" / "vendor" / "llama.cpp"


def convert(venv: Path, hf_dir: Path, out: Path, outtype: str = "f32") -> Path:
    """``hf_dir`` -> GGUF file ``out`` (written whole under a name of this process's, then
    renamed into place: two processes making the same file each write their own)."""
    part = f"{out}.{os.getpid()}.part"
    _run(
        venv,
        _CONVERT,
        [str(_llama_dir(venv)), str(hf_dir), "--outtype", outtype, "--outfile", part],
    )
    os.rename(part, out)
    return out


def quantize(venv: Path, src: Path, out: Path, ftype: str) -> Path:
    """GGUF file ``src`` (F32) -> ``out`` in llama.cpp's file type ``ftype`` (Q4_K_M ...),
    written as :func:`convert` writes."""
    part = f"{out}.{os.getpid()}.part"
    _run(venv, _QUANTIZE, [str(src), part, ftype])
    os.rename(part, out)
    return out


def logits(venv: Path, path: Path, tokens: list[int]) -> list[list[float]]:
    """llama.cpp's logits at every position of ``tokens`` run through the file ``path``
    (float32 KV cache: only the order of sums differs from float32 arithmetic)."""
    return json.loads(_run(venv, _LOGITS, [str(path), json.dumps(tokens)]).splitlines()[-1])


def _run(venv: Path, script: str, args: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    cmd = [str(venv / "bin" / "python"), "-c", script, *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"llama.cpp tool {' '.join(args[:3])} failed:\n{done.stderr[-3000:]}")
    return done.stdout
