"""A thin wrapper over a local Hugging Face tokenizer with the calls the engines need.

Decoding never applies ``clean_up_tokenization_spaces``: that post-pass rewrites text
across token boundaries (" ." -> "."), which would make decoding a sequence differ from
joining the decodes of its parts, and streaming relies on that equality. The light
decoder of another process (:class:`TextDecoder`) lives in :mod:`tandem.core.text.decoder`
and is imported from here as well. The transformers tokenizer itself is chosen and built
by :mod:`tandem.core.text.hf_tokenizer`, without importing torch where it can (the v1 engine's
front process loads a tokenizer but never runs the model); that front goes further and, where
it can match it exactly, loads :mod:`tandem.core.text.light_tokenizer` instead, without
transformers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tandem.core.text.decoder import TextDecoder, check_ids, decoding_only

__all__ = ["TextDecoder", "Tokenizer", "check_ids", "check_messages", "load_tokenizer"]

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
)


ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: Any, where: str = "messages") -> None:
    """TypeError/ValueError unless ``messages`` is a non-empty list of chat turns."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"{where} must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__}"
        )
    if not messages:
        raise ValueError(f"{where} is empty: give at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TypeError(
                f"{where}[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}"
            )
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise ValueError(f"{where}[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise TypeError(f"{where}[{i}].content must be a str, got {type(content).__name__}")


class Tokenizer:
    """The engines' view of a tokenizer: encode, decode and the special ids."""

    __slots__ = ("_all_special_ids", "_vocab_size", "hf", "path")

    def __init__(self, hf_tokenizer: Any, path: Path | None = None) -> None:
        for name in ("encode", "decode", "convert_ids_to_tokens"):
            if not callable(getattr(hf_tokenizer, name, None)):
                raise TypeError(
                    f"hf_tokenizer must be a transformers tokenizer (missing {name}()), "
                    f"got {type(hf_tokenizer).__name__}"
                )
        self.hf = hf_tokenizer
        self.path = path
        self._vocab_size = len(hf_tokenizer)
        self._all_special_ids = list(hf_tokenizer.all_special_ids)

    @property
    def eos_token_id(self) -> int | None:
        return self.hf.eos_token_id

    @property
    def bos_token_id(self) -> int | None:
        return self.hf.bos_token_id

    @property
    def pad_token_id(self) -> int | None:
        return self.hf.pad_token_id

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self._vocab_size

    @property
    def all_special_ids(self) -> list[int]:
        return list(self._all_special_ids)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return list(self.hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``. Ids past the tokenizer's vocab (models often pad their
        embedding matrix beyond it) decode to nothing, as in transformers."""
        checked = self._check_ids(ids)
        return self.hf.decode(
            checked,
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=False,
        )

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        return list(self.hf.convert_ids_to_tokens(self._check_ids(ids)))

    def _check_ids(self, ids: Sequence[int]) -> list[int]:
        return check_ids(ids)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.hf, "chat_template", None))

    @property
    def chat_template(self) -> str:
        """The chat template's text ("" when none, or when it is not one string)."""
        text = getattr(self.hf, "chat_template", None)
        return text if isinstance(text, str) else ""

    def apply_chat_template(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """Token ids of a conversation in the tokenizer's own chat template.

        ``messages``: ``[{"role": "system" | "user" | "assistant" | "tool", "content": str},
        ...]`` (an assistant turn may carry ``tool_calls``); ``tools``: the functions the
        template may show (OpenAI's ``tools`` shape; a template that never reads them
        ignores them).
        """
        check_messages(messages)
        if not self.has_chat_template:
            raise ValueError(
                f"the tokenizer at {self.path} has no chat template "
                "(tokenizer_config.json 'chat_template' or chat_template.jinja)"
            )
        extra = {"tools": [dict(t) for t in tools]} if tools else {}
        out = self.hf.apply_chat_template(
            [dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            tokenize=True,
            **extra,
        )
        ids = out["input_ids"] if isinstance(out, Mapping) or hasattr(out, "keys") else out
        return [int(i) for i in ids]

    def decoder_json(self) -> str | None:
        """The fast backend serialised (``tokenizers`` JSON) as far as decoding reads it
        (:func:`~tandem.core.text.decoder.decoding_only`), for a :class:`TextDecoder` in
        another process; None when the tokenizer has no fast backend."""
        kept = getattr(self.hf, "decoder_json", None)  # the light tokenizer keeps it made
        if callable(kept):
            return kept()
        backend = getattr(self.hf, "backend_tokenizer", None)
        to_str = getattr(backend, "to_str", None)
        return decoding_only(to_str()) if callable(to_str) else None

    def __len__(self) -> int:
        return self._vocab_size

    def __repr__(self) -> str:
        return f"Tokenizer(path={str(self.path)!r}, vocab_size={self._vocab_size})"


def load_tokenizer(
    path: str | os.PathLike[str], light_cache: str | os.PathLike[str] | None = None
) -> Tokenizer:
    """Load the tokenizer saved in the local directory ``path`` (never downloads).

    ``light_cache``: a folder; when given, encode, decode and render chat templates
    without importing transformers where :mod:`tandem.core.text.light_tokenizer` can match
    it exactly, its resolved form kept in that folder (for a process that never runs the
    model; ``Tokenizer.hf`` is then no transformers tokenizer), else load transformers' own.
    """
    if light_cache is not None and not isinstance(light_cache, (str, os.PathLike)):
        kind = type(light_cache).__name__
        raise TypeError(f"light_cache must be a str, os.PathLike or None, got {kind}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"tokenizer path must be a str or os.PathLike, got {type(path).__name__}")
    root = Path(path)
    if not root.exists():
        raise ValueError(f"tokenizer directory does not exist: {root}")
    if not root.is_dir():
        raise ValueError(f"tokenizer path must be a directory, got a file: {root}")
    if not any((root / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"no tokenizer found in {root}: expected one of {', '.join(TOKENIZER_FILES)}"
        )
    if light_cache is not None:
        from tandem.core.text.light_tokenizer import light_tokenizer

        found = light_tokenizer(root, Path(light_cache))
        if found is not None:
            return Tokenizer(found, path=root)
    from tandem.core.text.hf_tokenizer import load_hf_tokenizer

    try:
        hf = load_hf_tokenizer(root)
    except Exception as exc:  # transformers raises many kinds; keep the cause attached
        raise ValueError(f"could not load the tokenizer in {root}: {exc}") from exc
    return Tokenizer(hf, path=root)
