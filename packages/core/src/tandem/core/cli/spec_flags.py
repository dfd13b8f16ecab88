"""The speculative-decoding flags of ``tandem generate`` and ``tandem serve``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tandem.core.cli.flags import add_number


def _json_object(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"--speculative-config must be a JSON object, got {raw!r} ({exc.msg})"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"--speculative-config must be a JSON object, got {type(value).__name__}"
        )
    return value


def add_spec_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--speculative-config",
        type=_json_object,
        default=None,
        metavar="JSON",
        help='speculative decoding, e.g. \'{"method": "ngram", "num_speculative_tokens": 4, '
        '"prompt_lookup_max": 4}\' or \'{"model": "DRAFT", "num_speculative_tokens": 4}\'',
    )
    cmd.add_argument(
        "--speculative-model",
        default=None,
        metavar="DRAFT",
        help="a small model with the target's vocabulary that drafts tokens (a directory, "
        ".gguf file or model name); the target checks them in one step",
    )
    add_number(
        cmd,
        "--num-speculative-tokens",
        int,
        "tokens drafted per step (1..16; default: 4)",
        metavar="K",
        lo=1,
        hi=16,
    )


def spec_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``LLM`` keyword arguments the speculative flags ask for (none when unset)."""
    names = ("speculative_config", "speculative_model", "num_speculative_tokens")
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
