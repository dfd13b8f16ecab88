"""Reading config fields one by one, each failure naming the field and its value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def positive_int(hf_config: Any, name: str) -> int:
    value = getattr(hf_config, name, None)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"config.{name} must be a positive integer, got {value!r}")
    return value


def optional_int(hf_config: Any, name: str, default: int | None = None) -> int | None:
    value = getattr(hf_config, name, None)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"config.{name} must be a positive integer or null, got {value!r}")
    return value


def count(hf_config: Any, name: str, default: int = 0) -> int:
    """A non-negative integer (null: ``default``)."""
    value = getattr(hf_config, name, None)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"config.{name} must be an integer >= 0, got {value!r}")
    return value


def number(hf_config: Any, name: str, default: float) -> float:
    value = getattr(hf_config, name, None)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"config.{name} must be a number, got {value!r}")
    return float(value)


def optional_positive(hf_config: Any, name: str) -> float | None:
    """A positive number, or None where the config leaves it out or sets it to null."""
    value = getattr(hf_config, name, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"config.{name} must be a positive number or null, got {value!r}")
    return float(value)


def flag(hf_config: Any, name: str, default: bool = False) -> bool:
    value = getattr(hf_config, name, None)
    return default if value is None else bool(value)


def choice(hf_config: Any, name: str, allowed: Sequence[str], default: str) -> str:
    value = getattr(hf_config, name, None)
    value = default if value is None else value
    if value not in allowed:
        raise ValueError(f"config.{name} must be one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def first_architecture(hf_config: Any, supported: Sequence[str]) -> str:
    archs = getattr(hf_config, "architectures", None) or []
    if not archs:
        raise ValueError(
            "config.architectures must name the model class (one of "
            f"{', '.join(sorted(supported))}), got {archs!r}"
        )
    return str(archs[0])


def layer_types(hf_config: Any, num_layers: int) -> list[str] | None:
    """``config.layer_types`` checked (one of full/sliding_attention per layer), or None."""
    types = getattr(hf_config, "layer_types", None)
    if types is None:
        return None
    allowed = ("full_attention", "sliding_attention")
    if not isinstance(types, (list, tuple)) or len(types) != num_layers:
        raise ValueError(
            f"config.layer_types must list one entry per layer ({num_layers}), got {types!r}"
        )
    bad = [t for t in types if t not in allowed]
    if bad:
        raise ValueError(f"config.layer_types entries must be one of {allowed}, got {bad[0]!r}")
    return list(types)
