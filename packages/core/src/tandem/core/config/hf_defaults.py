"""transformers' config class defaults of every supported architecture (each declared
with its architecture: ``Architecture.hf_defaults``), by class name.

A config.json leaves out what its class defaults; :mod:`tandem.core.config.hf` fills those
fields from here without importing transformers. ``tests/core/test_hf_config.py`` holds
each value equal to transformers' own.
"""

from __future__ import annotations

from typing import Any

from tandem.core.models.architectures import ARCHITECTURES

DEFAULTS: dict[str, dict[str, Any]] = {
    name: dict(arch.hf_defaults) for name, arch in ARCHITECTURES.items()
}

# what a family's sliding_window reads as while use_sliding_window is false
WINDOW_OFF: dict[str, Any] = {name: arch.window_off for name, arch in ARCHITECTURES.items()}
