"""Decoding without transformers or torch, and the id check every decode runs.

:class:`TextDecoder` decodes straight on a ``tokenizers.Tokenizer`` built from the full
tokenizer's own backend, so the engine v1 detokenizer process starts in a fraction of a
second; :class:`tandem.core.text.tokenizer.Tokenizer` refuses bad ids with the same
:func:`check_ids`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def check_ids(ids: Sequence[int]) -> list[int]:
    """``ids`` as a list, refusing non-int and negative entries."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__}")
    out = list(ids)
    for i in out:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"ids must be ints, got {type(i).__name__} ({i!r})")
        if i < 0:
            raise ValueError(f"token ids must be >= 0, got {i}")
    return out


def decoding_only(text: str) -> str:
    """The ``tokenizers`` JSON ``text`` without what only encoding reads: a BPE model's
    merges. Decoding maps each id to its piece (the vocabulary and the added tokens) and
    runs the decoder chain; the merge list is never read, yet it is half of a loaded
    tokenizer's memory (SmolLM2's 49k vocabulary: 43 MiB loaded, 9 MiB without merges).
    Other models (WordPiece, Unigram, WordLevel) are returned as they are."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a tokenizers JSON str, got {type(text).__name__}")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"text is not a tokenizers JSON document: {exc}") from exc
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not model.get("merges"):
        return text
    model["merges"] = []
    return json.dumps(doc, ensure_ascii=False)


class TextDecoder:
    """Decoding only, straight on a ``tokenizers.Tokenizer``: no transformers, no torch.

    Built from :meth:`Tokenizer.decoder_json` (the very backend the full tokenizer
    decodes with, less its merges), so ``decode`` returns what :meth:`Tokenizer.decode`
    returns; the engine v1 detokenizer process uses it to start in a fraction of a second.
    """

    __slots__ = ("_backend",)

    def __init__(self, backend: Any) -> None:
        if not callable(getattr(backend, "decode", None)):
            raise TypeError(f"backend must be a tokenizers.Tokenizer, got {type(backend).__name__}")
        self._backend = backend

    @classmethod
    def from_json(cls, text: str) -> TextDecoder:
        if not isinstance(text, str):
            raise TypeError(f"text must be a tokenizers JSON str, got {type(text).__name__}")
        from tokenizers import Tokenizer as Backend

        try:
            return cls(Backend.from_str(text))
        except Exception as exc:  # the Rust side raises plain Exception
            raise ValueError(f"text is not a tokenizers JSON document: {exc}") from exc

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._backend.decode(check_ids(ids), skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        return f"TextDecoder(vocab_size={self._backend.get_vocab_size()})"
