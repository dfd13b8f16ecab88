"""Speculative decoding shared by both engines: the config, the proposers (n-gram
lookup in the request's own tokens, a small draft model) and the verify step that keeps
the target's output distribution exact.

Torch-free on import: ``config`` and ``ngram`` need no torch; ``verify`` and ``draft``
import it themselves.
"""

from __future__ import annotations

from tandem.core.config.speculative import METHODS, SpeculativeConfig
from tandem.core.speculative.ngram import propose_ngram

__all__ = ["METHODS", "SpeculativeConfig", "propose_ngram"]
