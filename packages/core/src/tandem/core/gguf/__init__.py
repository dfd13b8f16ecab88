"""GGUF files (llama.cpp's format) read in place as checkpoints.

- :mod:`~tandem.core.gguf.file`: the file's header parsed, its tensors views of a
  memory map;
- :mod:`~tandem.core.gguf.checkpoint`: the architecture's names and config
  (:mod:`tandem.core.models.architectures`), tensors under Hugging Face names;
- :mod:`~tandem.core.gguf.weights`: a model filled from it, block formats kept as stored;
- :mod:`~tandem.core.gguf.tokenizer`: the tokenizer it carries;
- :mod:`~tandem.core.gguf.export`: the same weights written out as a Hugging Face
  directory, only when asked.
"""

from __future__ import annotations

from tandem.core.gguf.checkpoint import GGUFCheckpoint, is_gguf, open_checkpoint

__all__ = ["GGUFCheckpoint", "is_gguf", "open_checkpoint"]
