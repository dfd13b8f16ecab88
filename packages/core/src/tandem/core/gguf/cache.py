"""A directory made once per GGUF file and kept under ``$TANDEM_CACHE_DIR/<kind>``.

The key is the file's path, size and time and a format version, so a changed file or a
changed layout gets a directory of its own. The directory is built in a temporary one
beside it and renamed into place, so a reader never sees half of it and two processes
building it at once both end with one whole copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


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
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=root))
    try:
        build(src, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: use its copy
            if not (target / done).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
