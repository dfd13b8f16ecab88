"""The tokenizer a GGUF file carries, as a tokenizer directory the engines load.

A GGUF file holds its vocabulary, merges (or scores), special tokens, add-BOS flag and chat
template as metadata. transformers builds a fast tokenizer from them; that takes seconds
for a large vocabulary, and every process of an engine loads the tokenizer, so it is
built once per file and saved (``tokenizer.json`` and its config: a few MB, no weights)
under ``$TANDEM_CACHE_DIR/tokenizers``, keyed by the file's path, size and time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

FORMAT_VERSION = 1
DONE = "tokenizer.json"


def _key(path: Path) -> str:
    stat = path.stat()
    text = f"{FORMAT_VERSION}:{path}:{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def tokenizer_dir(gguf_path: str | os.PathLike[str]) -> Path:
    """The directory of the tokenizer in ``gguf_path``, built on first use."""
    from tandem.core import envs

    src = Path(gguf_path).expanduser().resolve()
    root = Path(envs.TANDEM_CACHE_DIR).expanduser() / "tokenizers"
    target = root / f"{src.stem}-{_key(src)}"
    if (target / DONE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tok-", dir=root))
    try:
        _build(src, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: use its copy
            if not (target / DONE).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _build(src: Path, out: Path) -> None:
    import logging

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    quiet = logging.getLogger("transformers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "deriving merges from the vocabulary" and the like
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    except Exception as exc:  # transformers raises many kinds for a vocabulary it cannot build
        # AutoTokenizer first reads the file as a model config, and transformers knows
        # fewer GGUF architectures than tokenizers (deepseek2): the vocabulary alone
        # builds the same tokenizer through the generic class
        try:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(str(src.parent), gguf_file=src.name)
        except Exception:
            raise ValueError(f"could not read the tokenizer of {src}: {exc}") from exc
    finally:
        quiet.setLevel(level)
    tokenizer.save_pretrained(str(out))
