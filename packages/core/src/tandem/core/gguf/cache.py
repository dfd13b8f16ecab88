"""A directory made once per GGUF file and kept under ``$TANDEM_CACHE_DIR/<kind>``.

The key is the file's path, size and time and a format version, so a changed file or a
changed layout gets a directory of its own, built whole and renamed into place
(:mod:`tandem.core.atomic_dir`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from tandem.core.atomic_dir import build_into


def kept_dir(
    gguf_path: str | os.PathLike[str],
    kind: str,
    version: int,
    done: str,
    build: Callable[[Path, Path], object],
    announce: Callable[[Path, Path], None] | None = None,
) -> Path:
    """``$TANDEM_CACHE_DIR/<kind>/<stem>-<key>`` for ``gguf_path``; made on first use by
    ``build(source, directory)``, complete once ``directory/done`` exists."""
    from tandem.core import envs

    src = Path(gguf_path).expanduser().resolve()
    stat = src.stat()
    key = f"{version}:{src}:{stat.st_size}:{stat.st_mtime_ns}"
    root = Path(envs.TANDEM_CACHE_DIR).expanduser() / kind
    target = root / f"{src.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    if (target / done).is_file():
        return target
    if announce is not None:
        announce(src, target)
    build_into(target, done, lambda tmp: build(src, tmp) or True)
    return target
