"""Runs in child processes for the scripts that score llama.cpp and Tandem on SmolLM2's files.

``gguf_first_logits.py`` and ``gguf_quality.py`` run each side in a fresh process: llama.cpp
in the venv that ``llama_cpp_venv.sh`` builds, Tandem in this interpreter. The script calls
itself with ``--child KIND --file FILE`` and the arguments of its job; the child prints one
line, :data:`MARK` and its result as JSON (:func:`report`), which :func:`spawn` reads back.
:func:`smollm2_files` gives the float32 directory made from the shipped file and the GGUF
files of the same weights that both sides read (``gguf_files.py``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MARK = "RESULT "
OUT_DIR = Path(__file__).parent / "results" / "gguf"


def add_child_arguments(parser: argparse.ArgumentParser, *job: str) -> None:
    """The hidden arguments a child is called with: ``--child``, ``--file`` and ``job``'s."""
    for hidden in ("--child", "--file", *job):
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)


def require_venv(parser: argparse.ArgumentParser, venv: str | None) -> None:
    if not venv:
        parser.error("--llama-cpp-venv is required (made by benchmarks/llama_cpp_venv.sh)")


def report(result: Any) -> None:
    """The child's answer to :func:`spawn`: one marked line of JSON."""
    print(MARK + json.dumps(result), flush=True)


def spawn(script: str, kind: str, file: str, venv: str, job: list[str]) -> Any:
    """``script`` as a child of ``kind`` (``llama.cpp``: in ``venv``'s python) on ``file``
    with the arguments ``job``; its :func:`report`, or RuntimeError with its last lines."""
    python = str(Path(venv) / "bin" / "python") if kind == "llama.cpp" else sys.executable
    cmd = [python, script, "--child", kind, "--file", file, *job]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-4:]
        raise RuntimeError(f"{kind} on {file} failed: " + " | ".join(tail))
    return json.loads(lines[-1][len(MARK) :])


def smollm2_files(venv: str, formats: list[str]) -> tuple[Path, Path, dict[str, str]]:
    """SmolLM2's float32 directory, its shipped file and ``{format: GGUF file}``."""
    from gguf_files import make

    from tandem.core.catalog.default_model import gguf_file
    from tandem.core.gguf.export import exported

    shipped = gguf_file(print)
    path = exported(shipped)
    return path, shipped, make(Path(venv), path, shipped, OUT_DIR, formats)


def chat_ids(tokenizer: Any, prompt: str) -> tuple[str, list[int]]:
    """``prompt`` as one user turn in the chat template: the text and its token ids."""
    chat = [{"role": "user", "content": prompt}]
    text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    return text, tokenizer.encode(text, add_special_tokens=False)
