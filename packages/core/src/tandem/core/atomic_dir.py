"""A directory built whole beside its place, then renamed into it.

A reader never sees half of it, and two processes building the same one at once both
end with one whole copy (the second rename fails, and the first one's copy is used)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def build_into(target: Path, done: str, build: Callable[[Path], bool]) -> bool:
    """Make ``target`` by ``build(scratch)`` in a fresh folder beside it; ``done``: the file
    a whole ``target`` holds. False (and nothing put in place) where ``build`` answers
    False; an exception of ``build`` reaches the caller, with the scratch folder removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.parent.name}-", dir=target.parent))
    try:
        if not build(tmp):
            return False
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: use its copy
            if not (target / done).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True
