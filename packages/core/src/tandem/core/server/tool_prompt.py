"""A conversation with tools, in a form the model's chat template can render.

A template that reads ``tools`` / ``tool_calls`` / the ``tool`` role gets them as they
are (Hermes-style templates do). For one that does not, the server writes them in the
Hermes format itself: the tools into a system turn, an assistant's calls as
``<tool_call>`` blocks, a tool's answer as a user turn in ``<tool_response>`` tags.
"""

from __future__ import annotations

import json
from typing import Any

from tandem.core.server.tools import ToolPlan

INSTRUCTIONS = (
    "You may call these functions (JSON schema):\n<tools>\n{tools}\n</tools>\n"
    "To call one, write:\n"
    '<tool_call>\n{{"name": <function name>, "arguments": <arguments object>}}\n</tool_call>'
)


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _as_text_calls(turn: dict[str, Any]) -> dict[str, Any]:
    blocks = [
        json.dumps(
            {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])},
            ensure_ascii=False,
        )
        for c in turn.get("tool_calls", [])
    ]
    text = turn.get("content") or ""
    text += "".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks)
    return {"role": "assistant", "content": text}


def render(
    turns: list[dict[str, Any]], plan: ToolPlan, template: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(turns, tools for the template) for ``plan`` under the chat ``template`` text."""
    knows_calls = "tool_calls" in template
    knows_role = "tool" in template.replace("tool_calls", "").replace("tools", "")
    out: list[dict[str, Any]] = []
    for turn in turns:
        if turn["role"] == "assistant" and turn.get("tool_calls") and not knows_calls:
            out.append(_as_text_calls(turn))
        elif turn["role"] == "tool" and not knows_role:
            body = f"<tool_response>\n{turn['content']}\n</tool_response>"
            out.append({"role": "user", "content": body})
        else:
            out.append(turn)
    if not plan.active:
        return out, None
    tools = [t.as_template_arg() for t in plan.tools]
    if "tools" in template:
        return out, tools
    listed = "\n".join(
        json.dumps(t["function"], ensure_ascii=False, separators=(",", ":")) for t in tools
    )
    note = INSTRUCTIONS.format(tools=listed)
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{note}"}
    else:
        out.insert(0, {"role": "system", "content": note})
    return out, tools
