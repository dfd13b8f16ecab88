"""Is a constraint usable? Checked at the front door, before a request is queued.

The check builds the grammar without a vocabulary (cheap) and remembers the verdict
for the most recent specs, so a client repeating one schema pays for it once.
"""

from __future__ import annotations

import functools

from tandem.core.structured.engine import GrammarError, clean, grammar_of
from tandem.core.structured.spec import GrammarSpec
from tandem.core.validate import RequestError

WHAT = {
    "json": "JSON schema",
    "json_object": "JSON object grammar",
    "regex": "regex",
    "choice": "choice list",
    "grammar": "EBNF grammar",
}


@functools.lru_cache(maxsize=512)
def _verdict(spec: GrammarSpec) -> str | None:
    try:
        grammar_of(spec)
    except GrammarError as exc:
        return str(exc)
    except Exception as exc:  # the engine raises RuntimeError for every refusal
        return clean(exc)
    return None


def check_spec(spec: GrammarSpec, field: str = "structured_outputs") -> None:
    """RequestError naming ``field`` when the spec does not compile."""
    why = _verdict(spec)
    if why is not None:
        what = WHAT.get(spec.kind, spec.kind)
        raise RequestError(field, f"{field}: the {what} cannot be used: {why}")
