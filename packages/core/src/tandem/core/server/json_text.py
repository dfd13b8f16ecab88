"""A request body's JSON text read strictly: bounded depth, finite numbers, nothing else.

Python's reader recurses once per nesting level, so a body nested 100,000 lists deep ends
in a ``RecursionError``; it also takes ``NaN`` and ``Infinity`` (not JSON), turns
``1e400`` into ``inf`` and reads UTF-16 and UTF-32 bytes. Here each is a
:class:`JsonRefused` naming what is wrong, and a body may nest at most :data:`MAX_DEPTH`
levels (a request needs a handful; a JSON schema in ``response_format`` or a tool's
``parameters`` a few dozen at most).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64


class JsonRefused(ValueError):
    """The body is not JSON this server reads (the message says why)."""


def _constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"the number {text[:40]} is out of range (not a finite double)")
    return value


def depth(data: Any) -> int:
    """How many arrays and objects deep ``data`` nests (0: a scalar); walked without
    recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        level += 1
        deepest = max(deepest, level)
        stack.extend((item, level) for item in value if isinstance(item, (dict, list)))
    return deepest


def loads(raw: bytes) -> Any:
    """``raw`` parsed as strict JSON (an empty body is ``null``); JsonRefused otherwise."""
    try:
        text = raw.decode("utf-8") if raw else "null"  # JSON on the wire is UTF-8 (RFC 8259)
        data = json.loads(text, parse_constant=_constant, parse_float=_finite)
    except RecursionError:
        data = None
        too_deep = True
    except JsonRefused:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonRefused(str(exc)) from None
    else:
        too_deep = depth(data) > MAX_DEPTH
    if too_deep:
        raise JsonRefused(f"it nests arrays and objects more than {MAX_DEPTH} levels deep")
    return data
