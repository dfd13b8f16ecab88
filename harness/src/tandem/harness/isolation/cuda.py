"""Fork safety: a process that initialised CUDA must not fork; say where it was initialised.

torch is never imported here: it is used only when it is already in ``sys.modules``. The
stack of the first initialisation is kept by the wrapper that saw it (``first_init``), so
no table of this module outlives the torch it describes.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any


class ForkUnsafe(RuntimeError):
    """The process that forks test children has initialised CUDA."""


def record() -> None:
    """Wrap torch.cuda's lazy init (if torch is loaded) to keep the stack of the first call."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    init = getattr(cuda, "_lazy_init", None)
    if init is None or getattr(init, "_harness_wrapped", False):
        return

    first: list[str] = []

    def lazy_init(*args: Any, **kwargs: Any) -> Any:
        if not first:
            first.append("".join(traceback.format_stack()[:-1]))
        return init(*args, **kwargs)

    lazy_init._harness_wrapped = True  # type: ignore[attr-defined]
    lazy_init.first_init = first  # type: ignore[attr-defined]
    cuda._lazy_init = lazy_init  # type: ignore[union-attr]


def first_init() -> str | None:
    """The stack of the first CUDA initialisation seen by ``record``'s wrapper, if any."""
    torch = sys.modules.get("torch")
    init = getattr(getattr(torch, "cuda", None), "_lazy_init", None)
    first = getattr(init, "first_init", None)
    return first[0] if first else None


def initialised() -> bool:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    check = getattr(cuda, "is_initialized", None)
    try:
        return bool(check()) if check is not None else False
    except Exception:
        return False


def guard() -> None:
    """Raise if this process initialised CUDA (forking it would hand children a broken CUDA)."""
    if not initialised():
        return
    where = first_init() or "(not recorded: CUDA was initialised before the harness loaded)\n"
    raise ForkUnsafe(
        "tandem-harness: CUDA was initialised in the process that forks test children; "
        "forking it is unsafe. Use --harness-start spawn (or harness_start_method = spawn), "
        "or keep CUDA out of conftest/import time.\nFirst CUDA initialisation:\n" + where
    )
