"""Chat templates rendered with jinja2 alone, as transformers renders them.

A Hugging Face chat template is a jinja2 program that transformers runs in a sandbox with
a fixed set of helpers; a template depends on all of them (``raise_exception`` to refuse
a conversation, ``tojson`` that leaves non-ASCII and HTML characters as they are,
``strftime_now`` for today's date, ``{% generation %}`` blocks around the assistant's
turns). :func:`render_chat` sets up the same environment and hands the template the
same data (messages with their None fields dropped and reasoning under all its names,
plain JSON values only, the special tokens by name) without importing transformers;
``tests/core/test_light_tokenizer.py`` holds its output equal to transformers'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    special_tokens: Mapping[str, Any] | None = None,
) -> str:
    """The text of ``messages`` in ``template``."""
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    chat = [_aliased(_plain({k: v for k, v in m.items() if v is not None})) for m in messages]
    return _compiled(template).render(
        messages=chat,
        tools=_plain(list(tools)) if tools is not None else None,
        documents=_plain(list(documents)) if documents is not None else None,
        add_generation_prompt=add_generation_prompt,
        **_plain(dict(special_tokens or {})),
    )


def _aliased(message: dict[str, Any]) -> dict[str, Any]:
    """A message's reasoning under the name templates read and the one gpt-oss reads."""
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


def _plain(value: Any) -> Any:
    """``value`` rebuilt from plain JSON types (a template is untrusted code: it sees no
    object with methods of its own); anything else becomes ``"<TypeName>"``."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


@lru_cache(maxsize=16)
def _compiled(template: str) -> Any:
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}``: marks the assistant's text (for
        training masks); rendering keeps its body as it is."""

        tags = frozenset({"generation"})

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    class Namespace(jinja2.utils.Namespace):
        """A namespace that stores no underscore-prefixed attribute."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                Namespace.check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace.check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    "a chat template cannot store an underscore-prefixed attribute on a "
                    f"namespace, got {name!r}"
                )

    class Dicts:
        """``dict(...)`` and ``dict.fromkeys(...)`` and nothing else of the type."""

        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = Dicts()
    env.globals["namespace"] = Namespace
    return env.from_string(template)
