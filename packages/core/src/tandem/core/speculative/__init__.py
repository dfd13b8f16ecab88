"""Speculative decoding shared by both engines: the proposers (n-gram lookup in the
request's own tokens, a small draft model) and the verify step that keeps the target's
output distribution exact. Its config, checked with the others, is
:class:`~tandem.core.config.speculative.SpeculativeConfig` (handed on from here).

Torch-free on import: ``ngram`` needs no torch; ``verify`` and ``draft`` import it
themselves.
"""

from __future__ import annotations

from tandem.core.config.speculative import METHODS, SpeculativeConfig
from tandem.core.speculative.ngram import propose_ngram

__all__ = ["METHODS", "SpeculativeConfig", "propose_ngram"]
