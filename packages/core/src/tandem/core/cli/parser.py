"""Parsers that guide: whole flag names only, and a wrong one answered with the nearest.

argparse alone accepts any unambiguous prefix of a flag (``--temp``), and a flag that a
subcommand does not know travels up to the top-level parser, which prints the top-level
usage under the name ``tandem``. Here prefixes are refused, a subcommand refuses what it
does not know with its own usage and name (``tandem generate: error: ...``), and every
refusal names the flag or choice that was most likely meant: an ``_`` typed for a ``-``,
a prefix, or a near spelling.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

# how alike a mistyped flag or choice must be to a real one to be suggested
CUTOFF = 0.6
_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def suggest_flag(typed: str, flags: Sequence[str]) -> list[str]:
    """The flags ``typed`` most likely meant (none when nothing is near)."""
    name = typed.split("=", 1)[0]
    swapped = "--" + name.lstrip("-").replace("_", "-")
    if swapped in flags:
        return [swapped]
    longer = [f for f in flags if f.startswith(swapped) and len(swapped) > 2]
    if longer:
        return longer
    return difflib.get_close_matches(swapped, flags, n=1, cutoff=CUTOFF)


def suggest_choice(message: str) -> str:
    """``message`` (argparse's invalid-choice text) with the nearest choice added."""
    found = _CHOICE.search(message)
    if found is None:
        return message
    choices = re.findall(r"'([^']*)'", found.group(2))
    near = difflib.get_close_matches(found.group(1), choices, n=1, cutoff=CUTOFF)
    return f"{message}; did you mean {near[0]!r}?" if near else message


class GuidingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` without prefix matching whose errors suggest a choice."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # a subcommand's own parser

    def error(self, message: str) -> NoReturn:
        super().error(suggest_choice(message))

    def flags(self) -> list[str]:
        """Every long flag this parser takes."""
        return [s for a in self._actions for s in a.option_strings if s.startswith("--")]


class CommandParser(GuidingParser):
    """A subcommand's parser: options and positionals in any order; an argument it does
    not know is its own usage error, with the flag that was most likely meant.

    ``finish`` (when set) completes the parsed namespace, and may refuse it with
    :meth:`error`: the arguments that only make sense together are checked there.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.finish: Callable[[argparse.Namespace, CommandParser], None] | None = None
        self._inner = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._inner:  # the passes of parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            parsed, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False
        if extras:
            self.error(self.unknown(extras))
        if self.finish is not None:
            self.finish(parsed, self)
        return parsed, []

    def unknown(self, extras: Sequence[str]) -> str:
        """Why ``extras`` were refused, with the flag each one most likely meant."""
        parts = []
        for extra in extras:
            if not extra.startswith("-"):
                parts.append(f"unexpected argument {extra!r}")
                continue
            near = suggest_flag(extra, self.flags())
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            parts.append(f"unrecognized argument {extra.split('=', 1)[0]}{hint}")
        return "; ".join(parts) + f" (see {self.prog} --help)"
