"""How much memory the KV cache takes by default, and the longest context that fits it.

Unless ``num_kv_blocks`` or ``kv_cache_memory_bytes`` fixes the cache, it takes
``kv_cache_memory_fraction`` (:data:`DEFAULT_KV_CACHE_MEMORY_FRACTION` by default) of
the memory available once the model's weights are loaded, shared evenly by the
processes that hold a cache in that memory, and never more than ``max_num_seqs``
sequences of ``max_model_len`` tokens need (so a small model keeps a small cache).

When ``max_model_len`` was not given and one sequence of the model's whole context does
not fit, the context becomes the longest that does (whole blocks), with one warning
(:func:`warn_shortened`); a ``max_model_len`` that was given and does not fit is an error.
The arithmetic here is pure; :mod:`tandem.core.memory` measures the machine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tandem.core.engine_config import EngineConfig

LOGGER = logging.getLogger("tandem")

# Half of what is available after the weights: the rest stays for the activations of a
# step, the tokenizer, the page cache of the files being read and the machine's other
# programs. On the CPU every byte of the cache is touched when it is allocated.
DEFAULT_KV_CACHE_MEMORY_FRACTION = 0.5

KNOBS = (
    "set max_model_len (--max-model-len) for a shorter or longer context, or give the "
    "cache more memory with kv_cache_memory_fraction (--kv-cache-memory-fraction) or "
    "kv_cache_memory_bytes (--kv-cache-memory-bytes)"
)


def kv_budget_bytes(available: int, fraction: float, sharers: int = 1) -> int:
    """The bytes one process's KV cache may take: ``fraction`` of the ``available``
    bytes (memory free once the weights are loaded), split among ``sharers`` processes
    that each hold a cache in that memory."""
    if isinstance(available, bool) or not isinstance(available, int) or available < 0:
        raise ValueError(f"available must be an int >= 0 (bytes), got {available!r}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"kv_cache_memory_fraction must be in (0, 1], got {fraction!r}")
    if isinstance(sharers, bool) or not isinstance(sharers, int) or sharers < 1:
        raise ValueError(f"sharers must be an int >= 1, got {sharers!r}")
    return int(available * fraction) // sharers


def longest_context(
    blocks: int, limit: int, block_size: int, blocks_for: Callable[[int], int]
) -> int:
    """The longest context, a multiple of ``block_size`` and at most ``limit`` tokens,
    whose sequence needs at most ``blocks`` blocks (``blocks_for(tokens)``, which never
    falls as the context grows); 0 when not even one block's worth fits."""
    lo, hi = 0, limit // block_size  # in blocks of context: lo fits (or is 0), hi + 1 not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if blocks_for(mid * block_size) <= blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo * block_size


def shortened_text(config: EngineConfig, model_len: int) -> str:
    """What :func:`warn_shortened` says: the numbers, and how to change them."""
    cache = config.cache
    per_block = config.kv_bytes_per_block
    blocks = cache.num_blocks_resolved
    return (
        f"the model's context of {model_len} tokens does not fit the KV cache: "
        f"{blocks} blocks of {cache.block_size} tokens, {blocks * per_block} bytes "
        f"({cache.kv_source}) at {per_block // cache.block_size} bytes per token; starting with "
        f"max_model_len={cache.max_model_len}. To change it, {KNOBS}"
    )


def warn_shortened(config: EngineConfig, model_len: int) -> None:
    """Log once, on the ``tandem`` logger, that the context is shorter than the model's
    ``model_len`` (nothing when it is not)."""
    if config.cache.max_model_len < model_len:
        LOGGER.warning("%s", shortened_text(config, model_len))
