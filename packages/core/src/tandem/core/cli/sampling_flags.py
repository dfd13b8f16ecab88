"""The sampling flags of ``tandem generate``; temperature, top-p, top-k and min-p left out
take the model's own (its generation_config)."""

from __future__ import annotations

import argparse
from typing import Any

from tandem.core.cli.flags import add_number

# The flags whose default is the model's: flag, kind, range, what a value means, and what
# the sampler does when neither the flag nor the model's generation_config sets one.
MODEL_DEFAULTED: tuple[tuple[str, type, dict[str, Any], str, str], ...] = (
    ("--temperature", float, {"lo": 0.0}, "0 means greedy", "greedy"),
    ("--top-p", float, {"lo": 0.0, "hi": 1.0, "lo_open": True}, "", "1"),
    ("--top-k", int, {"lo": 0}, "0 turns top-k off", "off"),
    (
        "--min-p",
        float,
        {"lo": 0.0, "hi": 1.0},
        "drop tokens less likely than this fraction of the likeliest one; 0 turns it off",
        "off",
    ),
)


def add_sampling_flags(
    gen: argparse.ArgumentParser, max_tokens: int = 32, several: bool = True
) -> None:
    """The sampling flags (``args.max_tokens``, ``args.temperature``...); ``several``:
    also ``--n`` and ``--logprobs`` (completions side by side, printed at the end)."""
    add_number(
        gen,
        "--max-tokens",
        int,
        f"most tokens generated per completion (default: {max_tokens})",
        default=max_tokens,
        metavar="N",
        lo=1,
    )
    for flag, kind, bounds, meaning, fallback in MODEL_DEFAULTED:
        default = f"default: the model's generation_config, else {fallback}"
        add_number(gen, flag, kind, f"{meaning} ({default})" if meaning else default, **bounds)
    add_number(
        gen,
        "--seed",
        int,
        "the seed of each prompt's sampling (default: drawn in order from the engine's "
        "seed, 0, so the same command gives the same completions)",
    )
    gen.add_argument(
        "--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)"
    )
    gen.add_argument("--ignore-eos", action="store_true", help="keep going past EOS")
    if not several:
        return
    add_number(gen, "--n", int, "completions per prompt", default=1, lo=1)
    add_number(
        gen,
        "--logprobs",
        int,
        "print each token's logprob and the top K alternatives",
        metavar="K",
        lo=0,
    )
