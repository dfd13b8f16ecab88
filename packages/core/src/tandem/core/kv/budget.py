"""How much memory the KV cache takes by default, and the longest context that fits it.

Unless ``num_kv_blocks`` or ``kv_cache_memory_bytes`` fixes the cache, it takes
``kv_cache_memory_fraction`` (:data:`DEFAULT_KV_CACHE_MEMORY_FRACTION` by default) of
the memory available once the model's weights are loaded, shared evenly by the
processes that hold a cache in that memory, at most :data:`DEFAULT_KV_CACHE_CAP_BYTES`
unless the fraction was given, and never more than ``max_num_seqs`` sequences of
``max_model_len`` tokens need (so a small model keeps a small cache).

When ``max_model_len`` was not given and one sequence of the model's whole context does
not fit, the context becomes the longest that does (whole blocks), with one warning
(:func:`tandem.core.engine.context_fit.warn_shortened`); a ``max_model_len`` that was given and
does not fit is an error. The arithmetic here is pure; :mod:`tandem.core.kv.memory` measures
the machine.
"""

from __future__ import annotations

from collections.abc import Callable

# Half of what is available after the weights: the rest stays for the activations of a
# step, the tokenizer, the page cache of the files being read and the machine's other
# programs. On the CPU every byte of the cache is touched when it is allocated.
DEFAULT_KV_CACHE_MEMORY_FRACTION = 0.5
# ...and by default at most this much (as vLLM's CPU backend's default KV space): a small
# model on a large machine does not take gigabytes it will not use for one prompt, and
# every byte costs start-up time. Giving the fraction (or bytes) explicitly lifts it.
DEFAULT_KV_CACHE_CAP_BYTES = 4 << 30

KNOBS = (
    "set max_model_len (--max-model-len) for a shorter or longer context, or give the "
    "cache more memory with kv_cache_memory_fraction (--kv-cache-memory-fraction) or "
    "kv_cache_memory_bytes (--kv-cache-memory-bytes)"
)


def block_bytes(num_layers: int, kv_heads: int, head_dim: int, block_size: int, item: int) -> int:
    """Bytes one KV block takes across ``num_layers`` layers, keys and values together,
    at ``item`` bytes an element (no torch: the v1 front counts it too)."""
    return 2 * num_layers * kv_heads * head_dim * block_size * item


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


def split_pools(
    units: int, full_blocks: int, local_blocks: int, full_layers: int, local_layers: int
) -> tuple[int, int]:
    """(global pool, local pool) in blocks, out of ``units`` blocks of one layer, shared
    in proportion to one sequence's needs: ``full_blocks`` in each of ``full_layers``
    global layers, ``local_blocks`` in each of ``local_layers`` local ones. Where
    ``units`` covers one sequence, each pool holds at least its part of one."""
    cost = full_layers * full_blocks + local_layers * local_blocks
    full = units * full_blocks // cost
    return full, (units - full_layers * full) // local_layers
