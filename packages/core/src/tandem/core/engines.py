"""Engine discovery through the ``tandem.engines`` entry-point group.

Engines register themselves in their package metadata (``v0 = "tandem.v0:LLMEngine"``).
The lookup happens on every call, never at import time, so the engine a caller gets
always reflects the choice made at that moment.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

GROUP = "tandem.engines"
# preference order when neither the caller nor TANDEM_ENGINE chooses: the newest engine
# that is installed (v1 passes every suite v0 does, so it is the default)
DEFAULT_ORDER = ("v1", "v0")

# the methods every engine class offers (besides the from_engine_args constructor)
ENGINE_METHODS = (
    "add_request",
    "step",
    "abort_request",
    "has_unfinished_requests",
    "shutdown",
)


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def installed_engines() -> list[str]:
    """Names of the installed engines, sorted."""
    return sorted(_entry_points())


def default_engine() -> str:
    """The first installed engine of ``DEFAULT_ORDER`` (else any installed one)."""
    installed = installed_engines()
    for name in DEFAULT_ORDER:
        if name in installed:
            return name
    if not installed:
        raise ValueError(f"no engine is installed (entry-point group {GROUP!r} is empty)")
    return installed[0]


def resolve_engine_name(engine: str | None) -> str:
    """The engine to use: ``engine`` if given, else ``TANDEM_ENGINE``, else the default."""
    if engine is None:
        from tandem.core import envs

        engine = envs.TANDEM_ENGINE or default_engine()
    if not isinstance(engine, str):
        raise TypeError(f"engine must be a str such as 'v0' or 'v1', got {type(engine).__name__}")
    return engine


def load_engine_class(name: str) -> type[Any]:
    """Import and return the engine class registered as ``name``.

    Raises ValueError naming the installed engines when ``name`` is not one of them,
    and TypeError when the registered object lacks the engine interface.
    """
    found = _entry_points()
    if name not in found:
        listed = ", ".join(sorted(found)) or "none"
        raise ValueError(f"unknown engine {name!r}; installed engines: {listed}")
    cls = found[name].load()
    missing = [m for m in ("from_engine_args", *ENGINE_METHODS) if not hasattr(cls, m)]
    if missing:
        raise TypeError(
            f"engine {name!r} ({found[name].value}) lacks the engine interface: "
            f"missing {', '.join(missing)}"
        )
    return cls
