"""What an engine is (:class:`Engine`) and how one is found (the ``tandem.engines`` group).

Engines register themselves in their package metadata (``v0 = "tandem.v0:LLMEngine"``).
The lookup happens on every call, never at import time, so the engine a caller gets
always reflects the choice made at that moment. ``LLM``, ``AsyncLLM`` and the server
speak to an engine only through the :class:`Engine` protocol.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineArgs, EngineConfig
    from tandem.core.engine.stats import EngineStats
    from tandem.core.inputs.engine_request import EngineRequest
    from tandem.core.outputs.request_output import RequestOutput
    from tandem.core.text.tokenizer import Tokenizer

GROUP = "tandem.engines"
# preference order when neither the caller nor TANDEM_ENGINE chooses: the newest engine
# that is installed (v1 passes every suite v0 does, so it is the default)
DEFAULT_ORDER = ("v1", "v0")


@runtime_checkable
class Engine(Protocol):
    """The interface both engine generations satisfy (checked by tests and by mypy).

    An engine takes requests the front door already checked (one
    :class:`~tandem.core.inputs.engine_request.EngineRequest` each, made by the front door's
    :class:`~tandem.core.inputs.processor.InputProcessor`; its id is not one already
    running) and trusts them; it advances them one ``step`` at a time and hands back
    :class:`~tandem.core.outputs.request_output.RequestOutput` objects in the kind each
    request asked for. A request that fails inside a step ends with ``finish_reason="error"``; the
    engine goes on with the others. ``is_dead`` turns true only when the engine itself
    can serve nothing more (a child process died).
    """

    config: EngineConfig
    tokenizer: Tokenizer

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs) -> Engine: ...

    def add(self, request: EngineRequest) -> None: ...

    def step(self) -> list[RequestOutput]: ...

    def abort_request(self, request_id: str | list[str]) -> None: ...

    def has_unfinished_requests(self) -> bool: ...

    def stats(self) -> EngineStats: ...

    @property
    def is_dead(self) -> bool: ...

    def check_health(self) -> None:
        """Raise when the engine can serve nothing more (called while it is idle)."""
        ...

    def shutdown(self) -> None: ...


# what a class must offer to be an engine (the protocol's members, as names)
ENGINE_METHODS = (
    "from_engine_args",
    "add",
    "step",
    "abort_request",
    "has_unfinished_requests",
    "stats",
    "is_dead",
    "check_health",
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


def load_engine_class(name: str) -> type[Engine]:
    """Import and return the engine class registered as ``name``.

    Raises ValueError naming the installed engines when ``name`` is not one of them,
    and TypeError when the registered object lacks the engine interface.
    """
    found = _entry_points()
    if name not in found:
        listed = ", ".join(sorted(found)) or "none"
        raise ValueError(f"unknown engine {name!r}; installed engines: {listed}")
    cls = found[name].load()
    missing = [m for m in ENGINE_METHODS if not hasattr(cls, m)]
    if missing:
        raise TypeError(
            f"engine {name!r} ({found[name].value}) lacks the engine interface: "
            f"missing {', '.join(missing)}"
        )
    return cls
