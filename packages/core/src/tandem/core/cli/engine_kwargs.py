"""The ``LLM`` keyword arguments the engine flags of a command ask for."""

from __future__ import annotations

import argparse
from typing import Any

from tandem.core.cli.cache_flags import cache_args
from tandem.core.cli.kernel_flags import kernel_args
from tandem.core.cli.spec_flags import spec_args

PARALLEL_DEFAULTS = {
    "tensor_parallel_size": 1,
    "data_parallel_size": 1,
    "distributed_executor_backend": "mp",
}


def engine_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``LLM`` keyword arguments the flags ask for (the model aside).

    ``max_model_len`` is passed only when given: the engine then picks the context.
    """
    out: dict[str, Any] = {"dtype": args.dtype}
    if args.quantization is not None:
        out["quantization"] = args.quantization
    for name in ("tensor_parallel_size", "data_parallel_size", "distributed_executor_backend"):
        value = getattr(args, name)
        if value != PARALLEL_DEFAULTS[name]:  # left out: engine v0 takes the command too
            out[name] = value
    out.update(spec_args(args))
    out.update(cache_args(args))
    out.update(kernel_args(args))
    return out
