"""``tandem cache list|size|clear``: what ``$TANDEM_CACHE_DIR`` holds, and removing it.

``clear`` asks before it deletes (``--yes`` does not ask); with ``--kind`` it removes only
those kinds. Nothing in the cache is needed: what is removed is made again on next use.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from tandem.core.disk_cache import KINDS, OTHER, Entry, cache_root, entries, human, remove

ACTIONS = ("list", "size", "clear")


def add_cache_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``cache`` subcommand's parser."""
    kinds = "; ".join(f"{k}: {why}" for k, why in KINDS.items())
    cmd = sub.add_parser(
        "cache",
        help="list, size or clear what Tandem keeps on disk",
        description="What Tandem keeps in $TANDEM_CACHE_DIR (default ~/.cache/tandem): "
        "'list' shows each entry with its kind and size, 'size' the total per kind, "
        "'clear' removes entries (asking first; everything is made again when next needed).",
        epilog=f"Kinds: {kinds}; {OTHER}: anything else in the folder.",
        usage="%(prog)s {list,size,clear} [--kind KIND ...] [--yes]",
    )
    cmd.add_argument(
        "action", choices=ACTIONS, metavar="ACTION", help="list, size or clear (see above)"
    )
    cmd.add_argument(
        "--kind",
        action="append",
        choices=(*KINDS, OTHER),
        default=None,
        metavar="KIND",
        help=f"only entries of this kind (repeatable): {', '.join((*KINDS, OTHER))}",
    )
    cmd.add_argument("--yes", "-y", action="store_true", help="clear without asking (for scripts)")
    return cmd


def run_cache(args: argparse.Namespace) -> int:
    root = cache_root()
    found = entries(root, args.kind)
    what = "" if args.kind is None else f" of kind {', '.join(args.kind)}"
    if args.action == "list":
        print(f"{root}: {_count(found)}{what}, {human(sum(e.size for e in found))}")
        for e in found:
            print(f"  {human(e.size):>9}  {e.kind:<12}  {e.name(root)}")
        return 0
    if args.action == "size":
        sizes: Counter[str] = Counter()
        for e in found:
            sizes[e.kind] += e.size
        for kind, size in sorted(sizes.items()):
            print(f"  {human(size):>9}  {kind}")
        print(f"{human(sum(sizes.values()))} in {root}{what}")
        return 0
    return _clear(root, found, what, args.yes)


def _clear(root: Path, found: list[Entry], what: str, yes: bool) -> int:
    if not found:
        print(f"{root}: nothing to clear{what}")
        return 0
    total = human(sum(e.size for e in found))
    if not yes and not _confirm(f"remove {_count(found)}{what} ({total}) from {root}?"):
        print("tandem cache: nothing removed", file=sys.stderr)
        return 1
    failed = []
    for e in found:
        try:
            remove(e)
        except OSError as exc:
            failed.append(f"{e.path}: {exc.strerror or exc}")
    if failed:
        print("tandem cache: error: could not remove " + "; ".join(failed), file=sys.stderr)
        return 1
    print(f"removed {_count(found)}{what} ({total}) from {root}")
    return 0


def _count(found: list[Entry]) -> str:
    return "1 entry" if len(found) == 1 else f"{len(found)} entries"


def _confirm(question: str) -> bool:
    """The user's yes, read from stdin; no answer (end of input) is a no."""
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        print(file=sys.stderr)
        return False
    return answer.strip().lower() in ("y", "yes")
