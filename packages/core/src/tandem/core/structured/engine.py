"""The one place that speaks to the grammar engine (xgrammar), imported only when a
request asks for structured output.

JSON is compiled with fixed separators (``", "`` and ``": "``, no free whitespace): a
model sampling at temperature 1 can then not wander off into endless whitespace, and
the text is what ``json.dumps`` would write.
"""

from __future__ import annotations

import re
from typing import Any

from tandem.core.structured.spec import GrammarSpec, choice_ebnf

_PREFIX = re.compile(r"^\s*(\[[0-9:]+\]\s*)?(\S+\.(cc|h|cpp):\d+:\s*)?")
_CHECK = re.compile(r"Check failed: \(.*?\) is false:\s*")


class GrammarError(ValueError):
    """A schema, regex or grammar the engine cannot use, or a token it refused."""


def xgrammar() -> Any:
    try:
        import xgrammar as xgr
    except ImportError:
        raise GrammarError(
            "structured outputs need the xgrammar package: pip install 'tandem-core[structured]'"
        ) from None
    return xgr


def clean(exc: BaseException) -> str:
    """The engine's message without its time stamp, source file and check text."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = _CHECK.sub("", _PREFIX.sub("", lines[0] if lines else type(exc).__name__))
    return text.strip() or type(exc).__name__


def grammar_of(spec: GrammarSpec) -> Any:
    """The spec as an uncompiled grammar (no vocabulary needed: a syntax check)."""
    xgr = xgrammar()
    kind = spec.kind
    if kind == "json":
        return xgr.Grammar.from_json_schema(spec.source, any_whitespace=False)
    if kind == "json_object":
        return xgr.Grammar.from_json_schema('{"type": "object"}', any_whitespace=False)
    if kind == "regex":
        return xgr.Grammar.from_regex(spec.source)
    if kind == "choice":
        return xgr.Grammar.from_ebnf(choice_ebnf(spec.source))
    if kind == "grammar":
        return xgr.Grammar.from_ebnf(spec.source)
    raise GrammarError(f"unknown grammar kind {kind!r}")


def compile_spec(compiler: Any, spec: GrammarSpec) -> Any:
    """The spec compiled against ``compiler``'s vocabulary."""
    kind = spec.kind
    if kind == "json":
        return compiler.compile_json_schema(spec.source, any_whitespace=False)
    if kind == "json_object":
        return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
    if kind == "regex":
        return compiler.compile_regex(spec.source)
    if kind == "choice":
        return compiler.compile_grammar(choice_ebnf(spec.source))
    if kind == "grammar":
        return compiler.compile_grammar(spec.source)
    raise GrammarError(f"unknown grammar kind {kind!r}")
