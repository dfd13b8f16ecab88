"""Checked argparse types: a flag's value parsed and held to its range, the flag named;
and the declaration of a flag that takes one such number."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def number(
    kind: type, name: str, lo: float | None = None, hi: float | None = None, lo_open: bool = False
) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses ``kind`` and checks its range, naming the flag."""

    def parse(raw: str) -> Any:
        try:
            value = kind(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}"
            ) from None
        too_low = lo is not None and (value <= lo if lo_open else value < lo)
        too_high = hi is not None and value > hi
        if too_low or too_high:
            left = "(" if lo_open else "["
            bounds = f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
            raise argparse.ArgumentTypeError(f"{name} must be in {bounds}, got {raw}")
        return value

    return parse


def add_number(
    parser: argparse.ArgumentParser,
    flag: str,
    kind: type,
    help: str,
    default: Any = None,
    metavar: str | None = None,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
) -> None:
    """A flag taking one number of ``kind`` held to its range (:func:`number`), the flag
    named once for both the parser and its error messages."""
    parser.add_argument(
        flag,
        type=number(kind, flag, lo, hi, lo_open),
        default=default,
        metavar=metavar,
        help=help,
    )
