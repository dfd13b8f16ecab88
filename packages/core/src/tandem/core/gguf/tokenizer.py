"""The tokenizer a GGUF file carries, as a tokenizer directory the engines load.

A GGUF file holds its vocabulary, merges (or scores), special tokens, add-BOS flag and chat
template as metadata. transformers builds a fast tokenizer from them; that takes seconds
for a large vocabulary, and every process of an engine loads the tokenizer, so it is
built once per file and saved (``tokenizer.json`` and its config: a few MB, no weights)
under ``$TANDEM_CACHE_DIR/tokenizers``, keyed by the file's path, size and time.

transformers' GGUF reader imports torch, so a process that has not imported it (the v1
engine's front, which never runs the model) builds the directory in a child process
(``python -m tandem.core.gguf.tokenizer FILE DIR``) rather than keep torch resident.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tandem.core.gguf.cache import kept_dir

FORMAT_VERSION = 2  # 2: built without AutoTokenizer
DONE = "tokenizer.json"


def tokenizer_dir(gguf_path: str | os.PathLike[str]) -> Path:
    """The directory of the tokenizer in ``gguf_path``, built on first use."""
    return kept_dir(gguf_path, "tokenizers", FORMAT_VERSION, DONE, _build, _announce)


def _announce(src: Path, target: Path) -> None:
    from tandem.core.progress import say

    say(f"reading the tokenizer of {src.name} (once; kept in {target})")


def _build(src: Path, out: Path) -> None:
    """:func:`_build_here`, in a child process unless torch is imported here already."""
    if "torch" in sys.modules:
        _build_here(src, out)
        return
    module = "tandem.core.gguf.tokenizer"
    cmd = [sys.executable, "-m", module, str(src), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        why = lines[-1] if lines else f"the builder exited with code {done.returncode}"
        raise ValueError(why if why.startswith("could not read") else f"{src}: {why}")


def _build_here(src: Path, out: Path) -> None:
    """transformers' reading of a GGUF vocabulary (BPE or SentencePiece-style, by
    ``tokenizer.ggml.model``), without the model config that ``AutoTokenizer`` would also
    want for the file's architecture."""
    import logging

    from transformers import PreTrainedTokenizerFast

    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            convert_gguf_tokenizer,
            get_gguf_tokenizer,
        )
    except ImportError:  # transformers < 5 spells it differently: let AutoTokenizer read it
        _build_auto(src, out)
        return
    quiet = logging.getLogger("transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "deriving merges from the vocabulary" and the like
    try:
        architecture, vocabulary, settings = get_gguf_tokenizer(str(src))
        backend, extra = convert_gguf_tokenizer(architecture, vocabulary)
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **settings, **extra)
    except Exception as exc:  # transformers raises many kinds for a vocabulary it cannot build
        raise ValueError(f"could not read the tokenizer of {src}: {exc}") from exc
    finally:
        quiet.setLevel(level)
    tokenizer.save_pretrained(str(out))


def _build_auto(src: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    except Exception as exc:
        raise ValueError(f"could not read the tokenizer of {src}: {exc}") from exc
    tokenizer.save_pretrained(str(out))


def main(argv: list[str]) -> int:
    """``FILE DIR``: the tokenizer of GGUF file ``FILE`` saved in the directory ``DIR``."""
    if len(argv) != 2:
        print("usage: python -m tandem.core.gguf.tokenizer FILE.gguf DIR", file=sys.stderr)
        return 2
    try:
        _build_here(Path(argv[0]), Path(argv[1]))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
