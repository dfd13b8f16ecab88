"""A cache folder of its own for one test run, so tests never write to the user's cache.

A test run makes tiny models, tokenizers and exports as it goes; they belong to the run,
not to ``~/.cache/tandem``. :func:`session_cache` makes a fresh folder for them and
starts it with what is costly to make and never written again once made, taken from the
user's cache without changing it:

- the default model's downloaded file (93 MB over the network), linked: Tandem reads a
  GGUF file in place and never writes to it;
- the compiled C kernels (half a minute of compiling), copied: each is named by the hash
  of its sources, compiler and CPU, so a stale one is never picked.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

PREFIX = "tandem-test-cache-"


def user_cache() -> Path:
    """The cache the user's own runs use (``$TANDEM_CACHE_DIR`` now, or its default)."""
    from tandem.core.disk_cache import cache_root

    return cache_root()


def session_cache(source: Path | None = None, parent: str | None = None) -> Path:
    """A new, empty cache folder (under ``parent``, default the system's temp folder)
    started from ``source`` (default :func:`user_cache`), which is only read."""
    source = user_cache() if source is None else source
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    downloads = source / "downloads"
    if downloads.is_dir():
        (root / "downloads").mkdir()
        for item in downloads.iterdir():
            (root / "downloads" / item.name).symlink_to(item.resolve())
    native = source / "native"
    if native.is_dir():
        (root / "native").mkdir()
        for lib in native.glob("*.so"):
            shutil.copy2(lib, root / "native" / lib.name)
    return root
