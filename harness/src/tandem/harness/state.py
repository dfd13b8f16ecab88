"""Per-process state of the harness (the parent, the zygote and each child have their own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .options import Settings


@dataclass(slots=True)
class State:
    settings: Settings = field(default_factory=Settings)
    in_child: bool = False
    result_fd: int = -1
    boundary: bool = True  # caches are cleared before the next test
    last_engine: str | None = None
    seed: int = 0
    known: tuple[str, ...] = ()
    leak_notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


STATE = State()
