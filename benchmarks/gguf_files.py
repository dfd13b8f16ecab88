"""The GGUF files the single-stream benchmark compares, made from one model's weights.

``make(venv, hf_dir, shipped, out_dir, formats)`` returns ``{format: path}`` for formats
among ``f32``, ``q8_0``, ``q4_1``, ``q4_k_m``: f32 and q8_0 come from llama.cpp's own
converter run on the model directory (the one tandem made from the shipped file, so every
format holds the same weights); q4_k_m is llama.cpp's quantizer applied to the f32 file;
q4_1 is the shipped file itself. Both tools run in the llama.cpp venv that
``llama_cpp_venv.sh`` builds. Files are made once and kept in ``out_dir``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

FORMATS = ("f32", "q8_0", "q4_1", "q4_k_m")

# llama_cpp's quantizer, run in the venv's python: argv = source, destination, file type
# (the suffix of one of llama_cpp's LLAMA_FTYPE_MOSTLY_* constants, e.g. Q4_K_M)
_QUANTIZE = """
import sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3])
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), params)
sys.exit(rc)
"""


def _python(venv: Path) -> str:
    return str(venv / "bin" / "python")


def convert(venv: Path, hf_dir: Path, outtype: str, dest: Path) -> None:
    """llama.cpp's converter: the Hugging Face directory ``hf_dir`` -> ``dest`` in
    ``outtype`` (f32, f16, q8_0, ...)."""
    llama = venv / "src" / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(llama / "gguf-py"))
    cmd = [_python(venv), str(llama / "convert_hf_to_gguf.py"), str(hf_dir)]
    cmd += ["--outtype", outtype, "--outfile", str(dest)]
    done = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"convert_hf_to_gguf.py failed on {hf_dir}: {tail}")


def quantize(venv: Path, src: Path, dest: Path, ftype: str) -> None:
    """llama.cpp's quantizer: ``src`` -> ``dest`` as ``ftype`` (Q4_K_M, Q4_1, ...)."""
    cmd = [_python(venv), "-c", _QUANTIZE, str(src), str(dest), ftype.upper()]
    subprocess.run(cmd, check=True, capture_output=True)


def make(venv: Path, hf_dir: Path, shipped: Path, out_dir: Path, formats: list[str]) -> dict:
    """Each requested format's file, made where missing (see the module docstring)."""
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"formats must be among {', '.join(FORMATS)}, got {unknown}")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = shipped.name.split(".")[0].lower()
    files: dict[str, Path] = {"q4_1": shipped}
    for fmt in ("f32", "q8_0"):
        dest = out_dir / f"{stem}-{fmt}.gguf"
        needed = fmt in formats or (fmt == "f32" and "q4_k_m" in formats)
        if needed and not dest.exists():
            part = dest.with_suffix(".part")
            convert(venv, hf_dir, fmt, part)
            part.rename(dest)
        files[fmt] = dest
    dest = out_dir / f"{stem}-q4_k_m.gguf"
    if "q4_k_m" in formats and not dest.exists():
        part = dest.with_suffix(".part")
        quantize(venv, files["f32"], part, "q4_k_m")
        part.rename(dest)
    files["q4_k_m"] = dest
    return {fmt: str(files[fmt]) for fmt in formats}
