"""Compiling the C kernels of this folder once per machine, cached by content.

The shared library is built with the system C compiler (``$CC``, else ``cc``, ``gcc``
or ``clang``) for the CPU it runs on (``-march=native``) and cached under
``$TANDEM_CACHE_DIR/native`` (default ``~/.cache/tandem/native``), named by a hash of
the source, the flags, the compiler and the CPU's feature flags, so a change of any of
them builds anew and a cache shared between machines never serves a foreign binary.
A build writes a temporary file and renames it into place: processes building at the
same moment each end with a whole library. Building takes well under a second.

OpenMP comes from the ``libgomp.so.1`` torch has already loaded (the same soname), so
the kernels share torch's thread pool and its ``torch.set_num_threads`` setting.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCES = (
    "paged_attention.c",
    "elementwise.c",
    "quantize.c",
    "linear_i8.c",
    "linear_f32.c",
    "linear_gguf.c",
    "linear_gguf_rows.c",
    "linear_gguf_q8.c",
    "linear_gguf_plain.c",
    "linear_gguf_k.c",
    "gguf_k23.c",
    "gguf_half.c",
    "gguf_decode.c",
    "linear_gguf_f32.c",
    "decode_ops.c",
    "decode_moe.c",
    "decode_stack.c",
    "decode_latent.c",
    "latent.c",
    "moe.c",
    "topk.c",
)
HEADER = "tandem_kernels.h"  # the contract: every export, struct and shared constant
HEADERS = (
    HEADER,
    "decode_ops.h",
    "fastmath.h",
    "gguf_common.h",
    "gguf_k23.h",
    "gguf_rows.h",
    "linear_f32_avx2.h",
    "topk.h",
)
FLAGS = (
    "-O3",
    "-march=native",
    "-fopenmp",
    "-fPIC",
    "-shared",
    # reductions may be reordered (vectorized); no errno, traps or signed zeros. NaN and
    # infinity keep their meaning (no -ffinite-math-only: the softmax starts at -inf).
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fassociative-math",
    "-fno-signed-zeros",
)
# What holds the sources to the header: only its TANDEM_API functions are exported, and a
# global function without a declaration before it (a header's) does not compile.
CONTRACT_FLAGS = ("-fvisibility=hidden", "-Werror=missing-prototypes")


class BuildError(RuntimeError):
    """The C kernels could not be built here (no compiler, or the compiler failed)."""


def cache_dir() -> Path:
    root = os.environ.get("TANDEM_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tandem"
    )
    return Path(root) / "native"


def find_compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        path = shutil.which(name) if name else None
        if path:
            return path
    raise BuildError("no C compiler found (set CC, or install cc/gcc/clang)")


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return os.uname().machine


def library_path(compiler: str) -> Path:
    """Where the library for this source, compiler and CPU lives (built or not)."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in (*SOURCES, *HEADERS):
        digest.update((here / name).read_bytes())
    stat = os.stat(compiler)
    parts = (*FLAGS, *CONTRACT_FLAGS, os.path.realpath(compiler), str(stat.st_mtime_ns))
    for part in (*parts, _cpu_flags()):
        digest.update(part.encode())
    return cache_dir() / f"tandem_kernels-{digest.hexdigest()[:16]}.so"


def build() -> Path:
    """The cached library's path, compiling it first if needed; BuildError on failure."""
    compiler = find_compiler()
    target = library_path(compiler)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [compiler, *FLAGS, *CONTRACT_FLAGS, *(str(here / s) for s in SOURCES), "-o", tmp]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
            raise BuildError(f"{' '.join(cmd)} failed:\n" + "\n".join(tail))
        os.replace(tmp, target)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"{' '.join(cmd)} failed: {exc}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
