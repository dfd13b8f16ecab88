"""One supported architecture, declared whole in its family's module."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.core.models.architectures.common import split_qkv_gate_up
from tandem.core.models.weights import NameMap
from tandem.core.spec.model import ModelSpec

SpecBuilder = Callable[[Any, str, "int | None"], ModelSpec]


@dataclass(frozen=True, slots=True)
class Architecture:
    """``name``: transformers' class name (config.json's ``architectures`` entry);
    ``spec``: its config -> :class:`ModelSpec`; ``names``: checkpoint names -> ours;
    ``hf_defaults``: what transformers' config class defaults (a config.json leaves
    those fields out; ``tests/core/test_hf_config.py`` holds them equal to transformers');
    ``window_off``: what ``sliding_window`` reads as while ``use_sliding_window`` is
    false; ``tests``: the tiny test configs that carry the architecture's traps, by name
    (``make_model(arch=name)``): transformers' config class and the fields set."""

    name: str
    spec: SpecBuilder
    names: Callable[[ModelSpec], NameMap] = split_qkv_gate_up
    extra_layers: bool = False  # checkpoints carry layers past num_hidden_layers (unused)
    hf_defaults: Mapping[str, Any] = field(default_factory=dict)
    window_off: Any = None
    tests: Mapping[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
