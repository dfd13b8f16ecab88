"""Structured outputs: constraints on what a request may generate (JSON schema, JSON
object, regex, choice, EBNF grammar), enforced by masking the logits in the sampler.

``params`` and ``spec`` are plain data; ``check`` validates a constraint at the front
door; ``compiler`` (compiled grammars, cached), ``state`` (one sample's matcher) and
``bitmask`` (the batch's mask) serve the sampler of either engine. Only ``engine``
imports the grammar engine, and only when a constrained request comes.
"""

from __future__ import annotations

from tandem.core.structured.params import StructuredOutputsParams
from tandem.core.structured.spec import GrammarSpec

__all__ = ["GrammarSpec", "StructuredOutputsParams"]
