"""A tokenizer on the ``tokenizers`` library alone, for a process that never runs a model.

transformers and numpy cost the v1 engine's front ~60 MiB of resident memory for
encoding prompts and rendering chat templates. Building transformers' fast tokenizer
rewrites its backend as it goes (the BOS/EOS post-processor from ``add_bos_token``, the
special tokens missing from the vocabulary, per-class fixes), so rather than reimplement
those rules the tokenizer is resolved once per directory by transformers itself, in a
child process (:func:`resolve`): its backend as it ends up, its special ids and its chat
template, kept in a folder the caller names, with the part of the backend that
decoding reads (what the v1 detokenizer is sent, so the front never parses the whole
backend's JSON). :class:`LightTokenizer` then encodes and decodes on that very backend and
renders the template with :func:`~tandem.core.text.chat_template.render_chat`. Where the
class changes any of the calls used here (a slow tokenizer, a class with its own encode or
decode, several chat templates), :func:`resolve` says so and :func:`light_tokenizer`
returns None: the caller loads the transformers tokenizer instead.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tandem.core.atomic_dir import build_into
from tandem.core.text.chat_template import render_chat
from tandem.core.text.decoder import decoding_only

FORMAT_VERSION = 1
META, BACKEND, DECODER = "light.json", "backend.json", "decoder.json"
# the tokenizer's own files: a change to any of them resolves the directory again
SOURCES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "config.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
# the calls LightTokenizer stands in for: a class that defines any of them is left to transformers
OWN_CALLS = (
    "__call__",
    "__len__",
    "encode",
    "_encode_plus",
    "_batch_encode_plus",
    "_convert_encoding",
    "set_truncation_and_padding",
    "decode",
    "_decode",
    "convert_ids_to_tokens",
    "all_special_ids",
    "get_vocab",
    "apply_chat_template",
    "get_chat_template",
    "special_tokens_map",
)


class LightTokenizer:
    """The calls of a transformers fast tokenizer that
    :class:`~tandem.core.text.tokenizer.Tokenizer` makes, on the backend transformers
    built (``tokenizers.Tokenizer``)."""

    def __init__(self, backend: Any, meta: Mapping[str, Any], decoder: Path | None = None) -> None:
        self.backend_tokenizer = backend
        self._decoder = decoder  # the decoding part of the backend's JSON, kept in a file
        self._len = int(meta["len"])
        self.bos_token_id: int | None = meta["bos_token_id"]
        self.eos_token_id: int | None = meta["eos_token_id"]
        self.pad_token_id: int | None = meta["pad_token_id"]
        self.all_special_ids: list[int] = list(meta["all_special_ids"])
        self.special_tokens_map: dict[str, Any] = dict(meta["special_tokens_map"])
        self.chat_template: str | None = meta["chat_template"]
        backend.no_truncation()
        backend.no_padding()
        backend.encode_special_tokens = bool(meta["split_special_tokens"])

    def __len__(self) -> int:
        return self._len

    def decoder_json(self) -> str:
        """The backend's JSON as far as decoding reads it
        (:func:`~tandem.core.text.decoder.decoding_only`): read from the resolved form where
        it was kept, else made from the backend."""
        if self._decoder is not None:
            try:
                return self._decoder.read_text(encoding="utf-8")
            except OSError:  # an entry of an earlier version, or removed meanwhile
                pass
        return decoding_only(self.backend_tokenizer.to_str())

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(
        self,
        ids: Sequence[int],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool = False,
    ) -> str:
        """Text of ``ids``; the clean-up post-pass is never applied (see
        :mod:`tandem.core.text.tokenizer`), so asking for it is refused."""
        if clean_up_tokenization_spaces:
            raise ValueError("clean_up_tokenization_spaces is not supported here: pass False")
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str | None]:
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
    ) -> str | list[int]:
        """The conversation in the chat template, as text or (``tokenize``) its ids,
        encoded without added special tokens (the template writes its own)."""
        if not self.chat_template:
            raise ValueError("the tokenizer has no chat template")
        if not conversation:
            raise ValueError("the conversation is empty: give at least one message")
        text = render_chat(
            self.chat_template,
            conversation,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            documents=documents,
            special_tokens=self.special_tokens_map,
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text


def light_tokenizer(root: Path, cache: Path) -> LightTokenizer | None:
    """The light tokenizer of the directory ``root`` (resolved once, kept under
    ``cache``), or None where transformers' own tokenizer must be used (see the module's
    docstring)."""
    from tokenizers import Tokenizer as Backend

    try:
        resolved = resolved_dir(root, cache)
        if resolved is None:
            return None
        meta = json.loads((resolved / META).read_text(encoding="utf-8"))
        if not meta.get("supported"):
            return None
        backend = Backend.from_file(str(resolved / BACKEND))
        return LightTokenizer(backend, meta, resolved / DECODER)
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return None  # a cache folder it cannot write, a damaged entry: transformers' own


def resolved_dir(root: Path, cache: Path) -> Path | None:
    """``cache/<key>`` for the tokenizer in ``root`` (the key: its files' contents and the
    installed versions), resolved on first use by a child process; None when that child
    fails."""
    src = root.expanduser().resolve()
    key = [f"{FORMAT_VERSION}", *_versions()]
    for name in SOURCES:  # by content: a copied directory (a copied cache) finds its entry
        path = src / name
        if path.is_file():
            with path.open("rb") as f:
                key.append(f"{name}:{hashlib.file_digest(f, 'sha256').hexdigest()}")
    target = cache / hashlib.sha256("\n".join(key).encode()).hexdigest()[:24]
    if (target / META).is_file():
        return target

    def made(tmp: Path) -> bool:  # False: transformers could not load it either
        cmd = [sys.executable, "-m", "tandem.core.text.light_tokenizer", str(src), str(tmp)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        return done.returncode == 0 and (tmp / META).is_file()

    return target if build_into(target, META, made) else None


def _versions() -> list[str]:
    """What tells the installed transformers and tokenizers apart (another version may
    build the backend otherwise): tokenizers' version (imported here anyway) and
    transformers' ``__init__.py`` (which names its version), found without importing it."""
    import importlib.util

    import tokenizers

    spec = importlib.util.find_spec("transformers")
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    stat = origin.stat() if origin is not None and origin.is_file() else None
    found = f"{origin}:{stat.st_size}:{stat.st_mtime_ns}" if stat is not None else "-"
    return [f"tokenizers:{tokenizers.__version__}", f"transformers:{found}"]


def resolve(root: Path, out: Path) -> None:
    """Write the light form of the transformers tokenizer in ``root`` to ``out``: its
    backend and :data:`META` (``supported`` false where :class:`LightTokenizer` would not
    match it)."""
    from transformers import TokenizersBackend

    from tandem.core.text.hf_tokenizer import load_hf_tokenizer

    hf = load_hf_tokenizer(root)
    supported = isinstance(hf, TokenizersBackend) and isinstance(
        hf.chat_template, (str, type(None))
    )
    for cls in type(hf).__mro__:
        if cls is TokenizersBackend or not supported:
            break
        supported = not any(name in vars(cls) for name in OWN_CALLS)
    meta: dict[str, Any] = {"format": FORMAT_VERSION, "supported": supported}
    if supported:
        backend = hf.backend_tokenizer.to_str()
        (out / BACKEND).write_text(backend, encoding="utf-8")
        (out / DECODER).write_text(decoding_only(backend), encoding="utf-8")
        meta.update(
            len=len(hf),
            bos_token_id=hf.bos_token_id,
            eos_token_id=hf.eos_token_id,
            pad_token_id=hf.pad_token_id,
            all_special_ids=[int(i) for i in hf.all_special_ids],
            special_tokens_map=_strings(hf.special_tokens_map),
            chat_template=hf.chat_template,
            split_special_tokens=bool(hf.split_special_tokens),
        )
    (out / META).write_text(json.dumps(meta), encoding="utf-8")


def _strings(value: Any) -> Any:
    """Special tokens (``AddedToken`` or str, alone or in lists) as their strings."""
    if isinstance(value, Mapping):
        return {str(k): _strings(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strings(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float)) else str(value)


def main(argv: list[str]) -> int:
    """``DIR OUT``: the light form of the tokenizer in ``DIR`` written to ``OUT``."""
    if len(argv) != 2:
        print("usage: python -m tandem.core.text.light_tokenizer DIR OUT", file=sys.stderr)
        return 2
    resolve(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
