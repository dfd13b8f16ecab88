"""The transformers tokenizer of a local directory, chosen without AutoTokenizer where
the choice is plain.

AutoTokenizer picks a tokenizer class from tokenizer_config.json's ``tokenizer_class``
and the model's ``model_type``, through tables whose module imports transformers' config
machinery, and that imports torch: 200+ MiB of resident memory and seconds of start-up
in a process that never runs a model (the v1 engine's front). Here the same choice is
made from the directory's files and what those tables say of the supported model types
(:data:`REGISTERED`; ``tests/core/test_hf_tokenizer.py`` holds it equal to
transformers' own tables and the result equal to AutoTokenizer's), then the class is
built directly, as AutoTokenizer would build it. Where the choice is not plain (remote
code, no ``tokenizer.json`` or no class named, a model type outside the table,
transformers before 5) AutoTokenizer loads it, given a stand-in for the model config
where it can (:func:`model_config_stand_in`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# model_type -> (the class AutoTokenizer registers for it, or None; whether it overrides a
# checkpoint's own tokenizer_class for that type). "" is a directory without config.json
# (the tokenizer read from a GGUF file) or one whose config names no model_type.
REGISTERED: dict[str, tuple[str | None, bool]] = {
    "": (None, False),
    "llama": (None, False),
    "mistral": ("TokenizersBackend", False),
    "mixtral": ("TokenizersBackend", False),
    "qwen2": ("Qwen2Tokenizer", True),
    "qwen2_moe": ("Qwen2Tokenizer", False),
    "qwen3": ("Qwen2Tokenizer", False),
    "qwen3_moe": ("Qwen2Tokenizer", False),
    "gemma2": ("GemmaTokenizer", False),
    "gemma3": ("GemmaTokenizer", False),
    "gemma3_text": ("GemmaTokenizer", False),
    "granite": ("TokenizersBackend", False),
    "olmo2": ("TokenizersBackend", False),
    "phi3": ("TokenizersBackend", True),
    "deepseek_v2": (None, False),
    "deepseek_v3": (None, False),
}
# the generic classes: a checkpoint naming one gets the fast backend itself
GENERIC = ("TokenizersBackend", "PythonBackend", "PreTrainedTokenizerFast")


def load_hf_tokenizer(root: Path) -> Any:
    """The transformers tokenizer saved in ``root`` (never downloads); transformers'
    exceptions pass through."""
    chosen = tokenizer_class(root)
    if chosen is not None:
        return chosen.from_pretrained(str(root), local_files_only=True)
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {"local_files_only": True}
    stand_in = model_config_stand_in(root)
    if stand_in is not None:
        kwargs["config"] = stand_in
    return AutoTokenizer.from_pretrained(str(root), **kwargs)


def tokenizer_class(root: Path) -> type | None:
    """The class AutoTokenizer loads ``root`` as, or None where that is not plain."""
    tok_config = _json(root / "tokenizer_config.json")
    if tok_config is None or "auto_map" in tok_config or not (root / "tokenizer.json").is_file():
        return None
    named = tok_config.get("tokenizer_class")
    model_config = _json(root / "config.json") if (root / "config.json").exists() else {}
    if not isinstance(named, str) or model_config is None or "model_name" in model_config:
        return None
    model_type = model_config.get("model_type", "")
    if not isinstance(model_type, str) or model_type not in REGISTERED:
        return None
    import transformers

    backend = getattr(transformers, "TokenizersBackend", None)
    if backend is None:  # transformers < 5 chooses by other rules
        return None
    registered, overridden = REGISTERED[model_type]
    own = (registered or "").removesuffix("Fast")
    if named.removesuffix("Fast") == "LlamaTokenizer" and not overridden and _byte_level(root):
        return backend  # a Llama 3-style vocabulary under Llama 2's class name
    if model_type and registered is not None and own != named.removesuffix("Fast"):
        if own not in GENERIC:
            found = _by_name(own if overridden else named)
            if found is not None and found.__name__ not in GENERIC:
                return found
        return backend
    name = named[:-4] if named.endswith("Fast") else named
    found = _by_name(name) or _by_name(name + "Fast")
    return backend if found is None or found.__name__ in GENERIC else found


def model_config_stand_in(root: Path) -> Any:
    """What AutoTokenizer needs of the model's config, where it can be had without it.

    AutoTokenizer reads the model's config.json through AutoConfig only for its
    ``model_type`` (and, when tokenizer_config.json names no class, its config class),
    and loading it imports transformers' config machinery: 1.4 s of start-up, torch's
    distributed package included. Where tokenizer_config.json names its class and no
    remote code, a bare config with config.json's ``model_type`` and the directory as its
    name leads AutoTokenizer to the same class (``tests/core/test_hf_tokenizer.py`` holds
    it). None elsewhere: AutoTokenizer then reads the config itself.
    """
    tok_config, model_config = _json(root / "tokenizer_config.json"), _json(root / "config.json")
    if tok_config is None or model_config is None or "auto_map" in tok_config:
        return None
    model_type = model_config.get("model_type")
    if not isinstance(tok_config.get("tokenizer_class"), str) or not isinstance(model_type, str):
        return None
    from transformers import PretrainedConfig

    config = PretrainedConfig()
    config.model_type = model_type
    config.name_or_path = str(root)
    return config


def _by_name(name: str) -> type | None:
    """transformers' tokenizer class called ``name`` (its top-level names load lazily,
    one module each), or None."""
    import transformers
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    try:
        found = getattr(transformers, name, None)
    except (ImportError, AttributeError):  # a class whose optional dependency is missing
        return None
    return found if isinstance(found, type) and issubclass(found, PreTrainedTokenizerBase) else None


def _byte_level(root: Path) -> bool:
    """Whether tokenizer.json names a byte-level pre-tokenizer or decoder (the test
    AutoTokenizer makes)."""
    try:
        return '"ByteLevel"' in (root / "tokenizer.json").read_text(encoding="utf-8")
    except OSError:
        return False


def _json(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None
