"""llama.cpp's own tools run on checkpoints made here: its converter, its quantizer, and
its logits. Two kinds of directory hold them (:func:`find_tools` finds one):

- the llama.cpp venv that ``benchmarks/llama_cpp_venv.sh`` builds (10-30 min): llama.cpp
  compiled (``llama_cpp``), so all three tools; each runs in the venv's python (its own
  torch, transformers and ``llama_cpp``);
- a converter-only directory that ``benchmarks/llama_cpp_converter.sh`` unpacks from the
  same source package (a minute, nothing compiled): the converter alone, which is pure
  Python and runs in this process's python (the project's torch, transformers, numpy),
  with the one package it needs beside them, ``sentencepiece``, in the directory's
  ``site`` (where this python lacks it).

Both keep llama.cpp's source where the package has it, ``src/vendor/llama.cpp``. The
converter runs unchanged but for one thing: it names a BPE tokenizer's pre-tokenizer by
hashing its tokens of a fixed text, and a tokenizer trained here (``make_tokenizer``) has
no known hash; where (and only where) the hash is unknown, llama.cpp's ``gpt-2`` split is
used, which is the test tokenizer's (GPT-2's regex, no prefix space).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

VENV_DIR = Path("benchmarks") / "results" / "llama-cpp-venv"
CONVERTER_DIR = Path("benchmarks") / "results" / "llama-cpp-converter"
SOURCE = Path("src") / "vendor" / "llama.cpp"  # in either kind of directory
SITE = Path("site")  # a converter-only directory's packages the project's python lacks
# what the converter needs of llama.cpp's source (``conversion``: the models' classes)
CONVERTER_FILES = ("convert_hf_to_gguf.py", "conversion/base.py", "gguf-py/gguf/__init__.py")
HOW_TO_VENV = (
    "make one with benchmarks/llama_cpp_venv.sh (10-30 min), or point $LLAMA_CPP_VENV at one"
)

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


class NotCompiled(RuntimeError):
    """A tool that needs llama.cpp compiled, asked of a converter-only directory."""


@dataclass(frozen=True)
class Tools:
    """llama.cpp's tools in directory ``root``: the converter always, run by ``python``;
    the quantizer and the logits only where ``compiled`` (``python`` imports ``llama_cpp``)."""

    root: Path
    python: Path
    compiled: bool
    path: tuple[Path, ...] = ()  # put before ``python``'s own packages (``site``)

    @property
    def source(self) -> Path:
        """llama.cpp's source: ``convert_hf_to_gguf.py``, ``conversion/``, ``gguf-py/``."""
        return self.root / SOURCE

    def lacks(self, tool: str) -> str | None:
        """Why ``tool`` (``convert``, ``quantize``, ``logits``) cannot run here; None if it can."""
        if tool not in ("convert", "quantize", "logits"):
            raise ValueError(f"tool must be convert, quantize or logits, got {tool!r}")
        if tool == "convert" or self.compiled:
            return None
        what = "quantizer needs" if tool == "quantize" else "logits need"
        return (
            f"llama.cpp's {what} llama.cpp compiled, and {self.root} holds its converter only "
            f"({HOW_TO_VENV})"
        )

    def need(self, tool: str) -> None:
        """Raises :class:`NotCompiled` where ``tool`` cannot run here."""
        reason = self.lacks(tool)
        if reason:
            raise NotCompiled(reason)


def missing(root: str | os.PathLike[str]) -> list[str]:
    """The pieces of llama.cpp's converter that directory ``root`` lacks (paths in it):
    its source and, in a converter-only directory (no ``bin/python``), ``sentencepiece``
    where neither its ``site`` nor this python has it (the converter imports it for every
    Llama-like checkpoint, though it reads no SentencePiece model)."""
    root = Path(root)
    lacks = [str(SOURCE / f) for f in CONVERTER_FILES if not (root / SOURCE / f).is_file()]
    own = (root / "bin" / "python").is_file() or (root / SITE / "sentencepiece").is_dir()
    if not own and importlib.util.find_spec("sentencepiece") is None:
        lacks.append(str(SITE / "sentencepiece"))
    return lacks


def tools_at(root: str | os.PathLike[str]) -> Tools | None:
    """The tools in ``root`` (a llama.cpp venv or a converter-only directory); None where
    its converter is incomplete. A directory with its own ``bin/python`` runs the converter
    in it; it is compiled where that venv holds ``llama_cpp``'s built library."""
    root = Path(root).absolute()
    if missing(root):
        return None
    python = root / "bin" / "python"
    if not python.is_file():
        site = (root / SITE,) if (root / SITE).is_dir() else ()
        return Tools(root, Path(sys.executable), compiled=False, path=site)
    built = root.glob("lib/python3*/site-packages/llama_cpp/lib/libllama.*")
    return Tools(root, python, compiled=next(built, None) is not None)


def candidates(repo: str | os.PathLike[str]) -> list[Path]:
    """Where :func:`find_tools` looks, in order: ``$LLAMA_CPP_VENV``, then the llama.cpp venv
    and the converter-only directory of checkout ``repo`` and, for a git worktree, of its
    main checkout."""
    root = Path(repo)
    roots = [root]
    git = root / ".git"
    if git.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        roots.append(Path(git.read_text().split(":", 1)[1].strip()).parents[2])
    found = [Path(os.environ["LLAMA_CPP_VENV"])] if os.environ.get("LLAMA_CPP_VENV") else []
    return found + [r / d for d in (VENV_DIR, CONVERTER_DIR) for r in roots]


def find_tools(repo: str | os.PathLike[str]) -> Tools | None:
    """llama.cpp's tools for checkout ``repo``: those of ``$LLAMA_CPP_VENV`` where it holds
    either kind of directory, else the first compiled ones of :func:`candidates`, else the
    first converter; None where there is none."""
    env = os.environ.get("LLAMA_CPP_VENV")
    found = [t for t in map(tools_at, candidates(repo)) if t is not None]
    if not found:
        return None
    if env and found[0].root == Path(env).absolute():
        return found[0]
    return next((t for t in found if t.compiled), found[0])


def _tools(where: Tools | str | os.PathLike[str]) -> Tools:
    if isinstance(where, Tools):
        return where
    tools = tools_at(where)
    if tools is None:
        raise FileNotFoundError(f"no llama.cpp converter in {where}: {', '.join(missing(where))}")
    return tools


def convert(
    tools: Tools | str | os.PathLike[str], hf_dir: Path, out: Path, outtype: str = "f32"
) -> Path:
    """``hf_dir`` -> GGUF file ``out`` (written whole under a name of this process's, then
    renamed into place: two processes making the same file each write their own).
    ``tools``: :class:`Tools` or the directory that holds them."""
    tools = _tools(tools)
    part = f"{out}.{os.getpid()}.part"
    args = [str(tools.source), str(hf_dir), "--outtype", outtype, "--outfile", part]
    _run(tools.python, _CONVERT, args, tools.path)
    os.rename(part, out)
    return out


def quantize(tools: Tools | str | os.PathLike[str], src: Path, out: Path, ftype: str) -> Path:
    """GGUF file ``src`` (F32) -> ``out`` in llama.cpp's file type ``ftype`` (Q4_K_M ...),
    written as :func:`convert` writes; :class:`NotCompiled` where llama.cpp is not."""
    tools = _tools(tools)
    tools.need("quantize")
    part = f"{out}.{os.getpid()}.part"
    _run(tools.python, _QUANTIZE, [str(src), part, ftype])
    os.rename(part, out)
    return out


def logits(
    tools: Tools | str | os.PathLike[str], path: Path, tokens: list[int]
) -> list[list[float]]:
    """llama.cpp's logits at every position of ``tokens`` run through the file ``path``
    (float32 KV cache: only the order of sums differs from float32 arithmetic);
    :class:`NotCompiled` where llama.cpp is not."""
    tools = _tools(tools)
    tools.need("logits")
    out = _run(tools.python, _LOGITS, [str(path), json.dumps(tokens)])
    return json.loads(out.splitlines()[-1])


def _run(python: Path, script: str, args: list[str], path: tuple[Path, ...] = ()) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(map(str, path))
    cmd = [str(python), "-c", script, *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"llama.cpp tool {' '.join(args[:3])} failed:\n{done.stderr[-3000:]}")
    return done.stdout
