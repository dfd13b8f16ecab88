"""The context and KV cache flags of ``tandem generate`` and ``tandem serve``."""

from __future__ import annotations

import argparse
from typing import Any

from tandem.core.cli.flags import add_number
from tandem.core.kv.budget import DEFAULT_KV_CACHE_CAP_BYTES, DEFAULT_KV_CACHE_MEMORY_FRACTION

NAMES = ("max_model_len", "kv_cache_memory_fraction", "kv_cache_memory_bytes")


def add_cache_flags(cmd: argparse.ArgumentParser) -> None:
    add_number(
        cmd,
        "--max-model-len",
        int,
        "the context: the longest prompt + completion in tokens, up to the model's own "
        "maximum (default: that maximum, or the longest that fits the KV cache, with a warning)",
        metavar="N",
        lo=2,
    )
    add_number(
        cmd,
        "--kv-cache-memory-fraction",
        float,
        "the share of the memory left once the weights are loaded that the KV cache "
        "takes, at most what the engine's max_num_seqs full sequences need (default: "
        f"{DEFAULT_KV_CACHE_MEMORY_FRACTION:g}, and at most "
        f"{DEFAULT_KV_CACHE_CAP_BYTES >> 30} GiB unless this flag is given)",
        metavar="F",
        lo=0.0,
        hi=1.0,
        lo_open=True,
    )
    add_number(
        cmd,
        "--kv-cache-memory-bytes",
        int,
        "the KV cache's size in bytes, instead of a share of memory",
        metavar="BYTES",
        lo=1,
    )


def cache_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``LLM`` keyword arguments the cache flags ask for (none when unset)."""
    return {n: getattr(args, n) for n in NAMES if getattr(args, n, None) is not None}
