"""A chat choice as tool calls: the whole message, or the deltas of a stream.

One :class:`ToolView` per choice. For a named choice the output is the function's
arguments: they stream as they come. For ``required`` the output is a JSON list of
calls, and for ``auto`` text the parser reads: content streams until a call may begin,
the calls come in one delta when the choice ends.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from tandem.core.server.tool_parsers import ParsedCall, get_parser
from tandem.core.server.tools import ToolPlan


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(call: ParsedCall, cid: str | None = None, index: int | None = None) -> dict[str, Any]:
    fn = {"name": call.name, "arguments": call.arguments}
    out: dict[str, Any] = {"id": cid or call_id(), "type": "function", "function": fn}
    return out if index is None else {"index": index, **out}


def _listed(text: str) -> list[ParsedCall] | None:
    """The calls of a ``required`` output (a JSON list), None when it is cut short."""
    try:
        items = json.loads(text)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    calls = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            args = json.dumps(item.get("arguments", {}), ensure_ascii=False)
            calls.append(ParsedCall(item["name"], args))
    return calls


class ToolView:
    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.parser = get_parser(plan.parser)
        self.streamer = self.parser.streamer()
        self.id = call_id()
        self.started = False

    def _calls(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        mode = self.plan.mode
        if mode == "named":
            return None, [ParsedCall(self.plan.name or "", text)]
        if mode == "required":
            calls = _listed(text)
            return (text, []) if calls is None else (None, calls)
        content, calls = self.parser.parse(text)
        if not self.plan.parallel:
            calls = calls[:1]
        return content, calls

    def _reason(self, finish: str | None, calls: list[ParsedCall]) -> str | None:
        if finish == "stop" and calls and self.plan.mode != "named":
            return "tool_calls"
        return finish

    def message(self, text: str, finish: str | None) -> tuple[dict[str, Any], str | None]:
        """The whole message of a finished choice, and its finish reason."""
        content, calls = self._calls(text)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = [_call(c, self.id if i == 0 else None) for i, c in enumerate(calls)]
        return msg, self._reason(finish, calls)

    def delta(self, text: str, finish: str | None) -> tuple[dict[str, Any], str | None]:
        """The stream delta for ``text`` (new output) and the choice's finish reason."""
        if self.plan.mode == "named":
            head = not self.started
            self.started = True
            fn: dict[str, Any] = {"arguments": text}
            entry: dict[str, Any] = {"index": 0, "function": fn}
            if head:
                fn["name"] = self.plan.name
                entry.update(id=self.id, type="function")
            return ({"tool_calls": [entry]} if head or text else {}), finish
        shown = self.streamer.feed(text) if self.plan.mode == "auto" else ""
        if self.plan.mode == "required":
            self.streamer.text += text
        out: dict[str, Any] = {"content": shown} if shown else {}
        if finish is None:
            return out, None
        content, calls = self._calls(self.streamer.text)
        if calls:
            out["tool_calls"] = [_call(c, index=i) for i, c in enumerate(calls)]
        rest = self.streamer.text[self.streamer.sent :]
        if not calls and rest and self.plan.mode == "auto":
            out["content"] = shown + rest
        elif not calls and content and self.plan.mode == "required":
            out["content"] = content
        return out, self._reason(finish, calls)
