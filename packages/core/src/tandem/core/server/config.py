"""What a server is told at start: its names, keys, limits and manners.

The defaults keep one careless or hostile client from taking the server: a request may
carry at most ``max_prompts`` prompts and ``max_sequences`` sequences (prompts x ``n``),
the bodies at most ``max_body_bytes``; at most ``max_waiting`` sequences wait for the
engine, all clients together (a 429 past that); ``engine_window`` sequences are inside
the engine at once, handed out round-robin between clients. Cross-origin requests from
browsers are refused (no CORS headers) unless ``allowed_origins`` names the origins let in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tandem.core.validate import RequestError, RequestTypeError

MIB = 1 << 20
# a step's time grows with its batch, and a newcomer's request runs in that batch: 64
# keeps a small request under ~2 s behind a flood on the tiny model (see
# benchmarks/serve_fairness.py); a larger window serves one busy client faster
DEFAULT_WINDOW = 64


@dataclass(frozen=True, slots=True)
class ServerConfig:
    model_names: tuple[str, ...]  # the first is the one announced
    api_keys: tuple[str, ...] = ()  # none: no key asked
    strict_fields: bool = False  # an unknown body field is a 400 instead of ignored
    max_body_bytes: int = 16 * MIB
    max_prompts: int = 256
    max_sequences: int = 1024  # prompts x n in one request
    max_waiting: int = 4096  # sequences waiting for the engine, all clients together
    # sequences inside the engine (None: DEFAULT_WINDOW, at most the engine's max_num_seqs)
    engine_window: int | None = None
    body_timeout: float = 30.0  # seconds a client may take to send each part of a body
    retry_after: int = 1  # seconds a 429 asks the client to wait
    quiet: bool = False  # no access log lines
    tool_call_parser: str = "hermes"  # how tool calls are read from text (tool_choice auto)
    # CORS (vLLM's names): off unless origins are given; the others apply only then
    allowed_origins: tuple[str, ...] = ()
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False

    def __post_init__(self) -> None:
        names = self.model_names
        if isinstance(names, str) or not names:
            raise RequestTypeError(
                "model_names", f"model_names must be a non-empty tuple of names, got {names!r}"
            )
        for i, name in enumerate(names):
            if not isinstance(name, str) or not name.strip():
                raise RequestError(f"model_names[{i}]", f"a served model name is empty: {name!r}")
        for i, key in enumerate(self.api_keys):
            if not isinstance(key, str) or not key:
                raise RequestError(f"api_keys[{i}]", "an API key must be a non-empty string")
        for name in ("max_body_bytes", "max_prompts", "max_sequences", "max_waiting"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RequestError(name, f"{name} must be an int >= 1, got {value!r}")
        if self.engine_window is not None and self.engine_window < 1:
            raise RequestError(
                "engine_window", f"engine_window must be >= 1 or None, got {self.engine_window}"
            )
        from tandem.core.server.tool_parsers import PARSERS

        if self.tool_call_parser not in PARSERS:
            raise RequestError(
                "tool_call_parser",
                f"tool_call_parser must be one of {', '.join(sorted(PARSERS))}, "
                f"got {self.tool_call_parser!r}",
            )
        self._check_cors()
        if not self.body_timeout > 0:
            raise RequestError("body_timeout", f"body_timeout must be > 0, got {self.body_timeout}")

    def _check_cors(self) -> None:
        for field in ("allowed_origins", "allowed_methods", "allowed_headers"):
            values = getattr(self, field)
            if isinstance(values, str):
                raise RequestTypeError(field, f"{field} must be a tuple of strings, got {values!r}")
            for i, value in enumerate(values):
                if not isinstance(value, str) or not value.strip():
                    raise RequestError(f"{field}[{i}]", f"{field}[{i}] is empty: {value!r}")
        if self.allow_credentials and "*" in self.allowed_origins:
            raise RequestError(
                "allow_credentials",
                "allow_credentials with allowed_origins '*' would let every web page act with "
                "a browser's credentials; name the origins instead",
            )

    @property
    def name(self) -> str:
        """The model id the server announces."""
        return self.model_names[0]

    @property
    def waiting_room(self) -> int:
        """``max_waiting``, at least one whole request's sequences (a request the other
        limits let through can always wait)."""
        return max(self.max_waiting, self.max_sequences)


def config_for(
    model_name: str | tuple[str, ...] | ServerConfig | None, **options: Any
) -> ServerConfig:
    """A ``ServerConfig`` from a name (or names, the first announced) and options, or the
    one given."""
    if isinstance(model_name, ServerConfig):
        return replace(model_name, **options) if options else model_name
    given = model_name if isinstance(model_name, tuple) else (model_name,)
    names = options.pop("model_names", None) or given
    if isinstance(names, str):
        names = (names,)
    return ServerConfig(model_names=tuple(names), **options)
