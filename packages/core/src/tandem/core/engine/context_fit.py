"""The one warning an engine gives when the model's context did not fit its KV cache
and a shorter one was chosen (:mod:`tandem.core.kv.budget`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tandem.core.kv.budget import KNOBS

if TYPE_CHECKING:
    from tandem.core.config.engine import EngineConfig

LOGGER = logging.getLogger("tandem")


def shortened_text(config: EngineConfig, model_len: int) -> str:
    """What :func:`warn_shortened` says: the numbers, and how to change them."""
    cache = config.cache
    per_block = config.kv_bytes_per_block
    return (
        f"the model's context of {model_len} tokens does not fit the KV cache: "
        f"{cache.describe_blocks()}, {cache.kv_bytes(per_block)} bytes "
        f"({cache.kv_source}) at {cache.bytes_per_token(per_block)} bytes per token; starting with "
        f"max_model_len={cache.max_model_len}. To change it, {KNOBS}"
    )


def warn_shortened(config: EngineConfig, model_len: int) -> None:
    """Log once, on the ``tandem`` logger, that the context is shorter than the model's
    ``model_len`` (nothing when it is not)."""
    if config.cache.max_model_len < model_len:
        LOGGER.warning("%s", shortened_text(config, model_len))
