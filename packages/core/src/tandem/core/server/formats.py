"""The body fields that constrain the output, and the one constraint they make.

``response_format`` (OpenAI: ``text``, ``json_object``, ``json_schema``), vLLM's
``structured_outputs`` (``json``, ``regex``, ``choice``, ``grammar``, ``json_object``)
and its older ``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar``
all become one :class:`~tandem.core.structured.StructuredOutputsParams`, named after the
field it came from, so a bad schema is a 400 naming that field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tandem.core.server.field_types import NonEmptyText
from tandem.core.server.open_model import _Open
from tandem.core.structured import StructuredOutputsParams
from tandem.core.validate import RequestError

GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}


class JsonSchemaFormat(_Open):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Open):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputsBody(_Open):
    """vLLM's ``structured_outputs``: exactly one of these."""

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    json_object: bool | None = None
    regex: str | None = None
    choice: list[NonEmptyText] | None = Field(None, min_length=1)
    grammar: str | None = None


def _from_response_format(fmt: ResponseFormat) -> StructuredOutputsParams | None:
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutputsParams(json_object=True, name="response_format")
    where = "response_format.json_schema"
    if fmt.json_schema is None:
        raise RequestError(where, f"{where} is required when response_format.type is json_schema")
    schema = fmt.json_schema.schema_
    if schema is None:
        raise RequestError(f"{where}.schema", f"{where}.schema is required (a JSON schema)")
    return StructuredOutputsParams(json=schema, name="response_format")


def constraint_of(body: Any) -> StructuredOutputsParams | None:
    """The one constraint a body asks for (None: free); RequestError naming the field
    when it asks for more than one or for a malformed one."""
    found: list[StructuredOutputsParams] = []
    fmt: ResponseFormat | None = getattr(body, "response_format", None)
    if fmt is not None:
        made = _from_response_format(fmt)
        if made is not None:
            found.append(made)
    so: StructuredOutputsBody | None = getattr(body, "structured_outputs", None)
    if so is not None:
        found.append(
            StructuredOutputsParams(
                json=so.json_,
                json_object=bool(so.json_object),
                regex=so.regex,
                choice=so.choice,
                grammar=so.grammar,
                name="structured_outputs",
            )
        )
    for field, kind in GUIDED.items():
        value = getattr(body, field, None)
        if value is not None:
            found.append(StructuredOutputsParams(**{kind: value}, name=field))
    if len(found) > 1:
        names = ", ".join(c.name for c in found)
        raise RequestError(found[1].name, f"ask for one output constraint at a time; got {names}")
    return found[0] if found else None
