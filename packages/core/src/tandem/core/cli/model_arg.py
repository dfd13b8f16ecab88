"""The model of every subcommand: positional (``tandem serve tiny``, ``tandem generate tiny
"Hello"``) or ``--model``, the same meaning either way.

``tandem generate`` takes prompts as positionals too, so its first positional is the
model only when it names one (a model name, a directory with config.json, a ``.gguf``
file) or plainly tries to (a path, a near miss of a name: the resolver then says what is
wrong), and a prompt follows it. Given both ways with different values, the model is a
usage error that names both.
"""

from __future__ import annotations

import argparse
import os

from tandem.core.catalog.named_models import DEFAULT, TINY, find_named, is_model_path, nearest
from tandem.core.cli.parser import CommandParser

# a first word at least this alike to a model name is taken for a mistyped model
MISTYPED_CUTOFF = 0.85
MODEL_HELP = (
    f"a Hugging Face model directory with config.json, a .gguf file, or a name: {DEFAULT!r} "
    f"(SmolLM2-135M-Instruct, the default) or {TINY!r} (the built-in tiny test model)"
)


def add_model_flag(cmd: argparse.ArgumentParser) -> None:
    """``--model``: the same as the positional MODEL."""
    cmd.add_argument(
        "--model",
        dest="model_flag",
        default=None,
        metavar="MODEL",
        help="the same as the positional MODEL: " + MODEL_HELP,
    )


def add_model_positional(cmd: argparse.ArgumentParser) -> None:
    """``[MODEL]``: one optional positional (``tandem serve``)."""
    cmd.add_argument("model", nargs="?", default=None, metavar="MODEL", help=MODEL_HELP)
    add_model_flag(cmd)


def is_model(word: str) -> bool:
    """Whether ``word`` names a model: a name, or an existing model directory or file."""
    return find_named(word) is not None or is_model_path(word)


def _tries_to_name_a_model(word: str) -> bool:
    if any(c.isspace() for c in word):
        return False
    if os.sep in word or word.endswith(".gguf"):
        return True
    return nearest(word, cutoff=MISTYPED_CUTOFF) is not None


def _both(cmd: CommandParser, positional: str | None, flag: str | None) -> str | None:
    if positional is not None and flag is not None and positional != flag:
        cmd.error(
            f"the model is given twice, as MODEL {positional!r} and as --model {flag!r}: "
            "give one of them"
        )
    return positional if positional is not None else flag


def finish_serve(args: argparse.Namespace, cmd: CommandParser) -> None:
    """``args.model``: the positional MODEL or ``--model`` (None: the default)."""
    args.model = _both(cmd, args.model, args.model_flag)


def finish_generate(args: argparse.Namespace, cmd: CommandParser) -> None:
    """``args.model`` and ``args.prompts``, the model taken off the positionals when the
    first one names it."""
    words, flag = list(args.prompts), args.model_flag
    first, positional = words[0], None
    if is_model(first):
        if len(words) == 1:
            if flag is None:
                cmd.error(
                    f"MODEL {first!r} needs a PROMPT after it (to send {first!r} itself as "
                    "the prompt, give the model with --model)"
                )
        else:
            positional, words = first, words[1:]
    elif len(words) > 1 and flag is None and _tries_to_name_a_model(first):
        positional, words = first, words[1:]
    args.model = _both(cmd, positional, flag)
    args.prompts = words
