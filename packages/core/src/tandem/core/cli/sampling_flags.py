"""The sampling flags of ``tandem generate``; temperature, top-p, top-k and min-p left out
take the model's own (its generation_config)."""

from __future__ import annotations

import argparse

from tandem.core.cli.flags import number


def add_sampling_flags(
    gen: argparse.ArgumentParser, max_tokens: int = 32, several: bool = True
) -> None:
    """The sampling flags (``args.max_tokens``, ``args.temperature``...); ``several``:
    also ``--n`` and ``--logprobs`` (completions side by side, printed at the end)."""
    model_default = "default: the model's generation_config, else %s"
    gen.add_argument(
        "--max-tokens",
        type=number(int, "--max-tokens", lo=1),
        default=max_tokens,
        metavar="N",
        help=f"most tokens generated per completion (default: {max_tokens})",
    )
    gen.add_argument(
        "--temperature",
        type=number(float, "--temperature", lo=0.0),
        default=None,
        help="0 means greedy (" + model_default % "greedy" + ")",
    )
    gen.add_argument(
        "--top-p",
        type=number(float, "--top-p", lo=0.0, hi=1.0, lo_open=True),
        default=None,
        help=model_default % "1",
    )
    gen.add_argument(
        "--top-k",
        type=number(int, "--top-k", lo=0),
        default=None,
        help="0 turns top-k off (" + model_default % "off" + ")",
    )
    gen.add_argument(
        "--min-p",
        type=number(float, "--min-p", lo=0.0, hi=1.0),
        default=None,
        help="drop tokens less likely than this fraction of the likeliest one; 0 turns it off ("
        + model_default % "off"
        + ")",
    )
    gen.add_argument(
        "--seed",
        type=number(int, "--seed"),
        default=None,
        help="the seed of each prompt's sampling (default: drawn in order from the engine's "
        "seed, 0, so the same command gives the same completions)",
    )
    gen.add_argument(
        "--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)"
    )
    gen.add_argument("--ignore-eos", action="store_true", help="keep going past EOS")
    if not several:
        return
    gen.add_argument("--n", type=number(int, "--n", lo=1), default=1, help="completions per prompt")
    gen.add_argument(
        "--logprobs",
        type=number(int, "--logprobs", lo=0),
        default=None,
        metavar="K",
        help="print each token's logprob and the top K alternatives",
    )
