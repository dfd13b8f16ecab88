"""Local test fixtures: deterministic tiny checkpoints and tokenizers (no downloads)."""

from __future__ import annotations

from tandem.core.testing.models import MODEL_SIZES, make_model
from tandem.core.testing.reference import HFReference, run_to_completion
from tandem.core.testing.requests import add_request, inputs_of
from tandem.core.testing.tokenizer import make_tokenizer

__all__ = [
    "MODEL_SIZES",
    "HFReference",
    "add_request",
    "inputs_of",
    "make_model",
    "make_tokenizer",
    "run_to_completion",
]
