"""A GGUF file written out as a Hugging Face directory, when one is asked for.

Tandem never needs this to run a GGUF file (it reads the file in place). It is for
comparing: the same weights in float32 as a safetensors checkpoint that ``transformers``
and every other tool read (tests, benchmarks), or for handing a downloaded file to a tool
that only takes a directory. :func:`exported` keeps one copy per file under
``$TANDEM_CACHE_DIR/exports``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tandem.core.gguf.cache import kept_dir

FORMAT_VERSION = 1
DONE = "config.json"


def export_hf(gguf_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> Path:
    """Write ``gguf_path`` as a Hugging Face directory in ``out_dir`` (created): config,
    generation config, float32 ``model.safetensors`` and the tokenizer."""
    import torch
    from safetensors.torch import save_file

    from tandem.core.gguf.checkpoint import open_checkpoint
    from tandem.core.gguf.sampling import generation_config
    from tandem.core.gguf.tokenizer import tokenizer_dir

    checkpoint = open_checkpoint(gguf_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {t.name: torch.from_numpy(t.floats()) for t in checkpoint.tensors()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = checkpoint.config
    gen = generation_config(checkpoint, config)
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    for item in tokenizer_dir(checkpoint.path).iterdir():
        shutil.copy(item, out / item.name)
    (out / "config.json").write_text(json.dumps(config, indent=2))  # last: marks it done
    return out


def exported(gguf_path: str | os.PathLike[str]) -> Path:
    """The exported directory of ``gguf_path``, written on first use and kept."""
    return kept_dir(gguf_path, "exports", FORMAT_VERSION, DONE, export_hf)
