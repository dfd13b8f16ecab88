"""A small YAML writer for the generated workflow: block mappings and sequences, scalars
quoted whenever a YAML 1.1 reader could take them for anything but a string."""

from __future__ import annotations

import json
import re
from typing import Any

PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./@ -]*")
RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def scalar(value: Any) -> str:
    if value == {} or value == []:
        return "{}" if isinstance(value, dict) else "[]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"yaml: expected str, int or bool, got {type(value).__name__}")
    plain = PLAIN.fullmatch(value) and value.lower() not in RESERVED and value == value.strip()
    return value if plain else json.dumps(value)


def _flow(items: list[Any]) -> str | None:
    """A short list of scalars on one line, else None."""
    if any(isinstance(i, (dict, list)) for i in items):
        return None
    text = "[" + ", ".join(scalar(i) for i in items) + "]"
    return text if len(text) <= 60 else None


def lines(value: Any, indent: int = 0) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            head = f"{pad}{scalar(key)}:"
            if isinstance(item, dict) and item:
                out += [head, *lines(item, indent + 2)]
            elif isinstance(item, list) and item:
                flow = _flow(item)
                out += [f"{head} {flow}"] if flow else [head, *lines(item, indent + 2)]
            else:
                out.append(f"{head} {scalar(item)}")
        return out
    if isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                nested = lines(item, indent + 2)
                out.append(f"{pad}- {nested[0].lstrip()}")
                out += nested[1:]
            else:
                out.append(f"{pad}- {scalar(item)}")
        return out
    return [pad + scalar(value)]


def dump(value: Any, header: str = "") -> str:
    """The document text; `header` lines become `#` comments on top."""
    top = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join([*top, *lines(value)]) + "\n"
