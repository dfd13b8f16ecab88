"""Tool-call parsers: the text a model writes -> its content and its calls.

Parsers are found by name (``tandem serve --tool-call-parser hermes``);
:func:`register_parser` adds one. A parser answers :meth:`ToolParser.parse` on a whole
output, and :meth:`ToolParser.streamer` gives a :class:`Streamer` that tells, as the text
grows, which of it is content that may be shown now.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ParsedCall:
    name: str
    arguments: str  # JSON text


class ToolParser(Protocol):
    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        """(content or None, calls) of a whole output."""
        ...

    def streamer(self) -> Streamer: ...


class Streamer:
    """Content before a call's opening tag is streamed; once a tag may begin, the text
    is held back, and from the tag on it is the parser's at the end."""

    def __init__(self, opening: str) -> None:
        self.opening = opening
        self.text = ""
        self.sent = 0  # characters of text already streamed as content
        self.calling = False

    def feed(self, delta: str) -> str:
        """The content ``delta`` lets through now."""
        self.text += delta
        if self.calling:
            return ""
        at = self.text.find(self.opening, self.sent)
        if at >= 0:
            self.calling = True
            end = at
        else:
            end = len(self.text) - _partial(self.text, self.opening)
        out, self.sent = self.text[self.sent : end], max(self.sent, end)
        return out


def _partial(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that begins ``tag``."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number of them;
    a last call the output ends inside (no closing tag) counts when its JSON is whole."""

    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    _CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        calls: list[ParsedCall] = []
        kept: list[str] = []
        last = 0
        for match in self._CALL.finditer(text):
            call = _call(match.group(1))
            if call is None:
                continue
            kept.append(text[last : match.start()])
            last = match.end()
            calls.append(call)
        kept.append(text[last:])
        content = "".join(kept).strip() if calls else text
        return (content or None), calls

    def streamer(self) -> Streamer:
        return Streamer(self.OPEN)


def _call(body: str) -> ParsedCall | None:
    try:
        obj: Any = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ParsedCall(obj["name"], text)


PARSERS: dict[str, type] = {"hermes": HermesParser}


def register_parser(name: str, cls: type) -> None:
    """Make ``cls`` (a :class:`ToolParser` class) the parser called ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool-call parser needs a non-empty name, got {name!r}")
    if not callable(getattr(cls, "parse", None)) or not callable(getattr(cls, "streamer", None)):
        raise TypeError(f"{cls!r} is no tool-call parser: it needs parse() and streamer()")
    PARSERS[name] = cls


def get_parser(name: str) -> ToolParser:
    try:
        return PARSERS[name]()
    except KeyError:
        raise ValueError(
            f"unknown tool-call parser {name!r}; known: {', '.join(sorted(PARSERS))}"
        ) from None
