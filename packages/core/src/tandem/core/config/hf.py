"""``config.json`` read as transformers reads it, without importing transformers.

The engine reads a few dozen fields of the config (shapes, rope, eos ids, dtype), and
importing transformers' config machinery to get them costs 1.5-2 s of start-up (it
pulls in ``torch.distributed``), on the critical path of every ``LLM(...)``. The fields
a config.json leaves out take transformers' defaults for its architecture, written
down in :mod:`tandem.core.config.hf_defaults`; ``tests/core/test_hf_config.py`` holds them equal
to transformers' own, field by field, for every supported architecture.

The result is a plain namespace: every key of config.json as an attribute, the
defaults for the missing ones, and what transformers derives at construction
(``num_key_value_heads`` from the heads, the Qwen families' ``sliding_window`` off
unless used).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tandem.core.config.hf_defaults import DEFAULTS, WINDOW_OFF

__all__ = ["DEFAULTS", "load_hf_config", "read_hf_config"]


def read_hf_config(raw: dict[str, Any], architecture: str) -> SimpleNamespace:
    """config.json's object ``raw`` -> the namespace the engine reads, ``architecture``
    (one of :data:`DEFAULTS`) choosing the defaults."""
    if architecture not in DEFAULTS:
        raise ValueError(
            f"architecture must be one of {', '.join(sorted(DEFAULTS))}, got {architecture!r}"
        )
    if not isinstance(raw, dict):
        raise TypeError(f"raw must be config.json's object (a dict), got {type(raw).__name__}")
    values = {**DEFAULTS[architecture], **raw}
    if values.get("num_key_value_heads") is None:
        values["num_key_value_heads"] = values.get("num_attention_heads")
    if "dtype" not in values and "torch_dtype" in values:
        values["dtype"] = values["torch_dtype"]  # the older spelling
    if "use_sliding_window" in DEFAULTS[architecture] and not values.get("use_sliding_window"):
        values["sliding_window"] = WINDOW_OFF[architecture]
    return SimpleNamespace(**values)


def load_hf_config(root: Path, supported: tuple[str, ...]) -> tuple[SimpleNamespace, str]:
    """A model directory's config.json -> (its namespace, the supported architecture it
    names); a ValueError that says what was expected for anything else."""
    if not root.exists():
        raise ValueError(f"model directory does not exist: {root}")
    if not root.is_dir():
        raise ValueError(f"model must be a directory, got a file: {root}")
    cfg_file = root / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"no config.json in the model directory {root}")
    try:
        raw = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not parse {cfg_file}: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{cfg_file} must hold a JSON object, got {type(raw).__name__}")
    archs = raw.get("architectures") or []
    arch = next((a for a in archs if a in supported), None)
    if arch is None:
        raise ValueError(
            f"unsupported architecture {archs!r} in {cfg_file}; supported: {', '.join(supported)}"
        )
    return read_hf_config(raw, arch), arch
