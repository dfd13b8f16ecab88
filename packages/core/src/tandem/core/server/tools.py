"""Tool calls in /v1/chat/completions: the body's ``tools`` and ``tool_choice``, and
the plan they make for one request.

``tool_choice``: ``none`` (tools ignored), ``auto`` (the model writes text or calls in
the parser's format, e.g. Hermes ``<tool_call>{...}</tool_call>``), ``required`` (at
least one call) or a named function. ``required`` and named choices are enforced
through structured outputs: the output is constrained to JSON, a list of
``{"name", "arguments"}`` for ``required`` (one item without ``parallel_tool_calls``)
and the function's arguments for a named choice, so the arguments always match the
function's ``parameters`` schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from tandem.core.server.open_model import _Open
from tandem.core.structured import StructuredOutputsParams
from tandem.core.structured.check import check_spec
from tandem.core.validate import RequestError

NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
ANY_OBJECT: dict[str, Any] = {"type": "object"}


class FunctionDef(_Open):
    name: str = Field(pattern=f"^{NAME.pattern}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Open):
    type: Literal["function"]
    function: FunctionDef

    def schema(self) -> dict[str, Any]:
        return self.function.parameters or ANY_OBJECT

    def as_template_arg(self) -> dict[str, Any]:
        f = self.function
        spec: dict[str, Any] = {"name": f.name, "parameters": self.schema()}
        if f.description:
            spec["description"] = f.description
        return {"type": "function", "function": spec}


class NamedFunction(_Open):
    name: str


class NamedToolChoice(_Open):
    type: Literal["function"]
    function: NamedFunction


class ToolCallFunction(_Open):
    name: str
    arguments: str = Field("", description="the arguments as JSON text")


class ToolCallIn(_Open):
    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice
Mode = Literal["none", "auto", "required", "named"]


@dataclass(slots=True)
class ToolPlan:
    """How one request uses its tools; ``parser`` names the format of ``auto`` calls."""

    mode: Mode = "none"
    tools: list[ToolDef] = field(default_factory=list)
    name: str | None = None  # the function of a named choice
    parallel: bool = True
    parser: str = "hermes"

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def constraint(self) -> StructuredOutputsParams | None:
        """The output constraint ``required`` and named choices need (None for the others)."""
        if self.mode == "named":
            tool = next(t for t in self.tools if t.function.name == self.name)
            return StructuredOutputsParams(json=tool.schema(), name="tool_choice")
        if self.mode != "required":
            return None
        calls = [
            {
                "type": "object",
                "properties": {"name": {"const": t.function.name}, "arguments": t.schema()},
                "required": ["name", "arguments"],
            }
            for t in self.tools
        ]
        items = calls[0] if len(calls) == 1 else {"anyOf": calls}
        schema: dict[str, Any] = {"type": "array", "items": items, "minItems": 1}
        if not self.parallel:
            schema["maxItems"] = 1
        return StructuredOutputsParams(json=schema, name="tools")


def plan_tools(
    tools: list[ToolDef] | None,
    choice: ToolChoice | None,
    parallel: bool | None,
    parser: str,
) -> ToolPlan:
    """The request's plan; RequestError naming the field for a choice that cannot be met."""
    tools = list(tools or [])
    for i, tool in enumerate(tools):
        where = f"tools[{i}].function"
        if not NAME.fullmatch(tool.function.name):
            raise RequestError(
                f"{where}.name",
                f"{where}.name must be 1 to 64 letters, digits, '_', '-' or '.', "
                f"got {tool.function.name!r}",
            )
    names = [t.function.name for t in tools]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise RequestError("tools", f"tools: the function name {dup!r} is used twice")
    if choice is None:
        choice = "auto" if tools else "none"
    if choice != "none" and not tools:
        raise RequestError("tool_choice", f"tool_choice {_shown(choice)} needs tools; none given")
    name = None
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if name not in names:
            raise RequestError(
                "tool_choice",
                f"tool_choice names the function {name!r}, which is not in tools "
                f"({', '.join(names)})",
            )
    mode: Mode = "named" if name is not None else choice  # type: ignore[assignment]
    plan = ToolPlan(mode, tools, name, True if parallel is None else parallel, parser)
    if mode in ("required", "named"):
        for i, tool in enumerate(tools):
            if mode == "required" or tool.function.name == name:
                spec = StructuredOutputsParams(json=tool.schema()).spec()
                check_spec(spec, f"tools[{i}].function.parameters")
    return plan


def _shown(choice: Any) -> str:
    return repr(choice) if isinstance(choice, str) else repr(choice.function.name)
