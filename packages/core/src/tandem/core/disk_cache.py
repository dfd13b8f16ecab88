"""What Tandem keeps on disk under ``$TANDEM_CACHE_DIR`` (default ``~/.cache/tandem``).

Each top-level folder of the cache is a *kind* (``downloads``, ``tokenizers``...), and
each item in it is one *entry*: a file or folder made once and reused. Everything here is
made again on demand when it is missing, so any entry may be removed at any time that no
process is using it. ``tandem cache`` lists, sizes and clears entries through this module.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

# the kinds Tandem writes, and what each one holds
KINDS: dict[str, str] = {
    "downloads": "registry packages fetched for a named model (the default model's file)",
    "tokenizers": "tokenizers read out of GGUF files",
    "tokenizers-light": "tokenizers resolved once for the v1 front, which loads no transformers",
    "exports": "GGUF files written out as Hugging Face directories, for comparing",
    "native": "the C kernels, compiled for this machine",
    "models": "tiny test models made by tandem.core.testing",
    "gguf-sources": "checkpoints the GGUF test files are made from",
    "gguf-moe": "GGUF test files of mixture-of-experts models",
}
OTHER = "other"  # a top-level file, or a folder Tandem does not know


@dataclass(frozen=True, slots=True)
class Entry:
    """One cached item: its kind, its path and its size in bytes (symlinks not followed)."""

    kind: str
    path: Path
    size: int

    def name(self, root: Path) -> str:
        return str(self.path.relative_to(root))


def cache_root() -> Path:
    """The cache folder now: ``$TANDEM_CACHE_DIR``, else ``~/.cache/tandem``."""
    from tandem.core import envs

    return Path(envs.TANDEM_CACHE_DIR).expanduser()


def size_of(path: Path) -> int:
    """Bytes held by ``path``: a file's size, a folder's files summed; a symlink counts
    as itself, never as what it points to."""
    if path.is_symlink() or not path.is_dir():
        try:
            return path.lstat().st_size
        except OSError:  # removed meanwhile
            return 0
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def entries(root: Path, kinds: list[str] | None = None) -> list[Entry]:
    """Every entry under ``root`` (only those of ``kinds`` when given), sorted by kind
    and name. A missing root holds nothing."""
    if not root.is_dir():
        return []
    found: list[Entry] = []
    for top in sorted(root.iterdir()):
        known = top.is_dir() and not top.is_symlink() and top.name in KINDS
        kind = top.name if known else OTHER
        if kinds is not None and kind not in kinds:
            continue
        items = sorted(top.iterdir()) if known else [top]
        found += [Entry(kind, item, size_of(item)) for item in items]
    return found


def remove(entry: Entry) -> None:
    """Delete one entry (a symlink itself, never what it points to)."""
    path = entry.path
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def human(size: int) -> str:
    """``size`` bytes as people read it: ``93.4 MB`` (powers of 1000, as disks count)."""
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")
