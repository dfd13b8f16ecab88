"""What engine v1's client hands each child at start-up, shaped to load fast there.

* The engine core gets the ``EngineConfig`` with the transformers config object swapped
  for a plain namespace of the same attributes: unpickling a transformers config would
  import transformers (half a second to a second) in a process that never uses it.
  The model reads it through its own ``build_spec``, as it reads the original.
* The detokenizer gets the tokenizer's fast backend as ``tokenizers`` JSON, so it
  decodes with a :class:`~tandem.core.text.tokenizer.TextDecoder` and never imports torch
  or transformers; a tokenizer without a fast backend is loaded there in full.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from tandem.core.text.tokenizer import TextDecoder, Tokenizer, load_tokenizer

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig

_PLAIN = (str, int, float, bool, type(None))


def plain_hf_config(hf_config: Any) -> SimpleNamespace:
    """The instance attributes of a transformers config, as plain picklable values.

    Nested configs become namespaces too; values of other (library) types are dropped,
    except torch dtypes. ``model_type`` (a class attribute) is kept.
    """
    try:
        attrs = vars(hf_config)
    except TypeError:
        raise TypeError(
            f"hf_config must be a transformers config object, got {type(hf_config).__name__}"
        ) from None
    out = {k: v for k, v in ((k, _plain(v)) for k, v in attrs.items()) if v is not _DROP}
    model_type = getattr(hf_config, "model_type", None)
    if isinstance(model_type, str):
        out.setdefault("model_type", model_type)
    return SimpleNamespace(**out)


_DROP = object()


def _plain(value: Any) -> Any:
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return _DROP if any(v is _DROP for v in items) else type(value)(items)
    if isinstance(value, dict):
        pairs = {k: _plain(v) for k, v in value.items()}
        return _DROP if any(v is _DROP for v in pairs.values()) else pairs
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return value
    if hasattr(value, "to_dict") and hasattr(value, "__dict__"):
        return plain_hf_config(value)  # a nested transformers config
    return _DROP


def core_config(config: EngineConfig) -> EngineConfig:
    """``config`` (an EngineConfig) with ``model.hf_config`` as a plain namespace."""
    model = getattr(config, "model", None)
    if model is None or not dataclasses.is_dataclass(config) or not dataclasses.is_dataclass(model):
        raise TypeError(f"config must be an EngineConfig, got {type(config).__name__}")
    plain = plain_hf_config(model.hf_config)
    return dataclasses.replace(config, model=dataclasses.replace(model, hf_config=plain))


def detokenizer_setup(tokenizer: Tokenizer) -> dict[str, Any]:
    """The detokenizer's payload: the decoder JSON when there is one, and the path."""
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(f"tokenizer must be a tandem Tokenizer, got {type(tokenizer).__name__}")
    return {"decoder": tokenizer.decoder_json(), "tokenizer": str(tokenizer.path)}


def load_decoder(setup: dict[str, Any]) -> TextDecoder | Tokenizer:
    """The detokenizer's side of :func:`detokenizer_setup`."""
    text = setup.get("decoder")
    if text is not None:
        return TextDecoder.from_json(text)
    return load_tokenizer(setup["tokenizer"])


def plain_config(config: EngineConfig) -> EngineConfig:
    """``config`` with a plain transformers config, as :func:`core_config` makes it (a
    config already made so, as an engine core process holds it, is kept as it is)."""
    if type(config.model.hf_config).__module__ == "types":
        return config
    return core_config(config)
