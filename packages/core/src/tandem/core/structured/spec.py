"""What a constrained request asks for, as plain data that crosses processes.

A :class:`GrammarSpec` is a kind and a canonical source text; it is the key under which
the compiled grammar is cached, so two requests with the same schema share one
compilation. Nothing here imports the grammar engine.
"""

from __future__ import annotations

import json

import msgspec

KINDS = ("json", "json_object", "regex", "choice", "grammar")


class GrammarSpec(msgspec.Struct, array_like=True, frozen=True):
    """``kind``: one of :data:`KINDS`; ``source``: the JSON schema (canonical JSON text),
    the regex, the choices (a JSON list of strings) or the EBNF grammar; empty for
    ``json_object`` (any JSON object)."""

    kind: str
    source: str = ""

    @property
    def is_json(self) -> bool:
        return self.kind in ("json", "json_object")

    @classmethod
    def json_schema(cls, schema: dict) -> GrammarSpec:
        # keys keep their order: a schema's property order is the output's
        return cls("json", json.dumps(schema, ensure_ascii=False))

    @classmethod
    def choices(cls, options: list[str]) -> GrammarSpec:
        return cls("choice", json.dumps(options, ensure_ascii=False))


def ebnf_literal(text: str) -> str:
    """``text`` as an EBNF string literal (JSON string escapes are the grammar's too)."""
    return json.dumps(text, ensure_ascii=False)


def choice_ebnf(source: str) -> str:
    """The grammar of a ``choice`` spec: exactly one of its strings."""
    options = json.loads(source)
    return "root ::= " + " | ".join(ebnf_literal(o) for o in options)
