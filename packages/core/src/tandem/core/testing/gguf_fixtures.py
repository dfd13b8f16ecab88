"""GGUF files made by llama.cpp's own tools, and the checkpoints they were made from.

A fixture directory (the project's is ``tests/models/gguf_files``) holds ``.gguf`` files and a
``manifest.json`` that says, for each file, which source checkpoint it was converted from. A
source is rebuilt exactly from its manifest entry: ``make_model`` with the recorded settings,
then the recorded edits (another tokenizer's files copied in, extra ``config.json`` fields
that only llama.cpp's converter reads). ``gguf_fixture(directory, name)`` returns the file and
the rebuilt checkpoint directory, cached under ``TANDEM_CACHE_DIR/gguf-sources``.

Importing this module does not import torch or transformers; building a checkpoint does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
# the files make_tokenizer writes; a source with another tokenizer replaces all of them
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tandem_tokenizer.json",
)


def load_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The fixture directory's manifest (``files`` and ``sources`` tables)."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"directory {str(directory)!r} has no {MANIFEST}")
    return json.loads(path.read_text(encoding="utf-8"))


def gguf_fixture(directory: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """``(gguf_path, hf_dir)`` for file ``name`` of the fixture directory."""
    manifest = load_manifest(directory)
    files = manifest["files"]
    if name not in files:
        raise ValueError(f"name must be one of {', '.join(sorted(files))}, got {name!r}")
    gguf_path = Path(directory) / name
    if not gguf_path.is_file():
        raise FileNotFoundError(f"{name} is in the manifest but not in {str(directory)!r}")
    return gguf_path, source_checkpoint(directory, files[name]["source"])


def source_checkpoint(
    directory: str | os.PathLike[str], source: str, target: str | os.PathLike[str] | None = None
) -> Path:
    """Rebuild source ``source`` of the manifest (in ``target``, or the cache); returns its dir."""
    sources = load_manifest(directory)["sources"]
    if source not in sources:
        raise ValueError(f"source must be one of {', '.join(sorted(sources))}, got {source!r}")
    return build_source(sources[source], Path(directory), target)


def build_source(
    entry: dict[str, Any], directory: Path, target: str | os.PathLike[str] | None = None
) -> Path:
    """The checkpoint a manifest ``sources`` entry describes (see the module docstring)."""
    tokenizer = entry.get("tokenizer")
    tok_dir = directory / tokenizer if tokenizer else None
    if tok_dir is not None and not tok_dir.is_dir():
        raise FileNotFoundError(f"tokenizer directory {str(tok_dir)!r} of the manifest is missing")
    stamp = json.dumps({"entry": entry, "tokenizer": _digest_dir(tok_dir)}, sort_keys=True)
    if target is None:
        from tandem.core import envs

        digest = hashlib.sha256(stamp.encode()).hexdigest()[:16]
        target = Path(envs.TANDEM_CACHE_DIR) / "gguf-sources" / f"{entry['arch']}-{digest}"
    target = Path(target)
    marker = target / "gguf_source.json"
    if marker.is_file() and marker.read_text(encoding="utf-8") == stamp:
        return target
    if target.exists() and any(target.iterdir()):
        raise ValueError(f"path {str(target)!r} already holds something else; pass a new directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        _build(entry, tok_dir, tmp)
        (tmp / "gguf_source.json").write_text(stamp, encoding="utf-8")
        if target.exists():
            target.rmdir()
        os.rename(tmp, target)
    except OSError:
        if not (marker.is_file() and marker.read_text(encoding="utf-8") == stamp):
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _build(entry: dict[str, Any], tok_dir: Path | None, out: Path) -> None:
    from tandem.core.testing.models import make_model

    spec = entry["make_model"]
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        made = make_model(
            Path(scratch) / "model",
            size=spec["size"],
            arch=spec["arch"],
            seed=spec["seed"],
            **spec["overrides"],
        )
        for item in made.iterdir():
            if item.name == "tandem_model.json":
                continue
            if tok_dir is not None and item.name in _TOKENIZER_FILES:
                continue
            shutil.copy2(item, out / item.name)
    if tok_dir is not None:
        for item in sorted(tok_dir.iterdir()):
            shutil.copy2(item, out / item.name)
    extra = entry.get("config_extra") or {}
    if extra:
        config_path = out / "config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config.update(extra)
        config_path.write_text(
            json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )


def _digest_dir(path: Path | None) -> str | None:
    if path is None:
        return None
    sha = hashlib.sha256()
    for item in sorted(path.iterdir()):
        sha.update(item.name.encode() + b"\0" + item.read_bytes())
    return sha.hexdigest()
