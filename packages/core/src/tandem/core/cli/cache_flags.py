"""The context and KV cache flags of ``tandem generate`` and ``tandem serve``."""

from __future__ import annotations

import argparse
from typing import Any

from tandem.core.cli.flags import number
from tandem.core.kv.budget import DEFAULT_KV_CACHE_CAP_BYTES, DEFAULT_KV_CACHE_MEMORY_FRACTION

NAMES = ("max_model_len", "kv_cache_memory_fraction", "kv_cache_memory_bytes")


def add_cache_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--max-model-len",
        type=number(int, "--max-model-len", lo=2),
        default=None,
        metavar="N",
        help="the context: the longest prompt + completion in tokens, up to the model's own "
        "maximum (default: that maximum, or the longest that fits the KV cache, with a warning)",
    )
    cmd.add_argument(
        "--kv-cache-memory-fraction",
        type=number(float, "--kv-cache-memory-fraction", lo=0.0, hi=1.0, lo_open=True),
        default=None,
        metavar="F",
        help="the share of the memory left once the weights are loaded that the KV cache "
        "takes, at most what the engine's max_num_seqs full sequences need (default: "
        f"{DEFAULT_KV_CACHE_MEMORY_FRACTION:g}, and at most "
        f"{DEFAULT_KV_CACHE_CAP_BYTES >> 30} GiB unless this flag is given)",
    )
    cmd.add_argument(
        "--kv-cache-memory-bytes",
        type=number(int, "--kv-cache-memory-bytes", lo=1),
        default=None,
        metavar="BYTES",
        help="the KV cache's size in bytes, instead of a share of memory",
    )


def cache_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``LLM`` keyword arguments the cache flags ask for (none when unset)."""
    return {n: getattr(args, n) for n in NAMES if getattr(args, n, None) is not None}
