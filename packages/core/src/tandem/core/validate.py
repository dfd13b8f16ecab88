"""Field checks shared by every public entry: errors name the field, the rule and the value."""

from __future__ import annotations

import math
from typing import Any


def type_name(value: Any) -> str:
    return type(value).__name__


def check_int(name: str, value: Any, lo: int | None = None, none_ok: bool = False) -> None:
    """TypeError unless ``value`` is an int (bool is not); ValueError when below ``lo``."""
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int or None" if none_ok else "an int"
        raise TypeError(f"{name} must be {kind}, got {type_name(value)} ({value!r})")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")


def check_float(name: str, value: Any) -> float:
    """TypeError unless ``value`` is a real number; ValueError for NaN or infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type_name(value)} ({value!r})")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{name} must be a finite number, got {out}")
    return out


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type_name(value)} ({value!r})")
