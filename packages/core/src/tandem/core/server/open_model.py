"""The base of every request body: unknown fields kept aside, known-but-unsupported
fields refused by name.

A field this server does not know is ignored (the route names it in a warning and the
``X-Tandem-Ignored-Fields`` header; ``--strict-fields`` refuses it instead). A field it
knows but cannot honour (:data:`NOT_YET`) is refused by name when it asks for
something, so that a client is never answered as if it had been honoured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from tandem.core.validate import RequestError


def _set(value: Any) -> bool:
    return value is not None and value != {} and value != [] and value != ""


# fields of the OpenAI API (and vLLM's) that need the engines' sampler: refused while
# they ask for something; an implementation declares the field and leaves this table
NOT_YET: dict[str, Callable[[Any], bool]] = {
    "functions": _set,  # the deprecated form of tools
    "function_call": lambda v: _set(v) and v != "none",
    "best_of": lambda v: _set(v) and v != 1,
    "suffix": _set,
}


class _Open(BaseModel):
    """A body part that keeps unknown fields aside (``model_extra``) instead of failing,
    and reads its fields strictly, as its published schema says (no ``"5"`` for 5)."""

    model_config = ConfigDict(extra="allow", strict=True)

    def unknown(self, at: str = "") -> list[str]:
        """Every field this server does not read, as a path (``messages[0].tool_call_id``)."""
        found = [f"{at}{name}" for name in (self.model_extra or {})]
        for name in type(self).model_fields:
            value = getattr(self, name)
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                if isinstance(item, _Open):
                    where = f"{at}{name}[{i}]." if isinstance(value, list) else f"{at}{name}."
                    found += item.unknown(where)
        return found

    def refuse_not_yet(self) -> None:
        for name, asks in NOT_YET.items():
            value = (self.model_extra or {}).get(name)
            if asks(value):
                raise RequestError(name, f"{name} is not supported by this server yet")
