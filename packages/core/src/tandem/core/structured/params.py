"""``StructuredOutputsParams``: the constraint a request puts on its output.

One of ``json`` (a JSON schema, as a dict or its JSON text), ``json_object`` (any JSON
object), ``regex``, ``choice`` (one of these strings) or ``grammar`` (EBNF, the GBNF
dialect: ``root ::= ...``). Its shape is checked when it is built; whether the schema,
regex or grammar compiles is checked by the engine's input processor
(:func:`tandem.core.structured.check.check_spec`), so both fail before any queue.
``name`` is how errors name the constraint (a server passes the body field it came
from: ``response_format``, ``tools[0].function.parameters``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tandem.core.structured.spec import GrammarSpec
from tandem.core.validate import RequestError, RequestTypeError, check_text, type_name

FIELDS = ("json", "json_object", "regex", "choice", "grammar")
MAX_CHOICES = 4096
MAX_SOURCE = 256 * 1024  # characters of a schema, regex or grammar


@dataclass(slots=True, frozen=True)
class StructuredOutputsParams:
    json: dict[str, Any] | str | None = None
    json_object: bool = False
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    name: str = "structured_outputs"

    def __post_init__(self) -> None:
        given = [name for name in FIELDS if _given(getattr(self, name))]
        if len(given) != 1:
            what = f"got {', '.join(given)}" if given else "got none"
            raise RequestError(
                self.name, f"{self.name} must set exactly one of {', '.join(FIELDS)}; {what}"
            )
        self.spec()  # every shape error is raised here

    def spec(self) -> GrammarSpec:
        """The constraint as plain data (canonical, so equal constraints share a cache entry)."""
        made = self._spec()
        if len(made.source) > MAX_SOURCE:
            raise RequestError(
                self.name,
                f"{self.name} is {len(made.source)} characters long; at most {MAX_SOURCE}",
            )
        return made

    def _spec(self) -> GrammarSpec:
        if self.json is not None:
            return GrammarSpec.json_schema(_schema(f"{self.name}.json", self.json))
        if self.json_object:
            if not isinstance(self.json_object, bool):
                where = f"{self.name}.json_object"
                raise RequestTypeError(
                    where, f"{where} must be a bool, got {type_name(self.json_object)}"
                )
            return GrammarSpec("json_object")
        if self.regex is not None:
            return GrammarSpec("regex", _text(f"{self.name}.regex", self.regex))
        if self.choice is not None:
            return GrammarSpec.choices(_choices(f"{self.name}.choice", self.choice))
        return GrammarSpec("grammar", _text(f"{self.name}.grammar", self.grammar))


def _given(value: Any) -> bool:
    return value is not None and value is not False


def _schema(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise RequestError(name, f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RequestTypeError(
            name, f"{name} must be a JSON schema (an object), got {type_name(value)}"
        )
    return value


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise RequestTypeError(name, f"{name} must be a str, got {type_name(value)}")
    if not value:
        raise RequestError(name, f"{name} must not be empty")
    check_text(name, value)
    return value


def _choices(name: str, value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value:
        raise RequestTypeError(name, f"{name} must be a non-empty list of str, got {value!r}")
    if len(value) > MAX_CHOICES:
        raise RequestError(name, f"{name} has {len(value)} choices; at most {MAX_CHOICES}")
    for i, option in enumerate(value):
        _text(f"{name}[{i}]", option)
    return list(value)
