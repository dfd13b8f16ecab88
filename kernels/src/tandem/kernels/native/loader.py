"""Loading the C kernels once per process, bound to the prototypes of their header
(:mod:`tandem.kernels.native.contract`).

``library()`` answers the loaded library or None (``unavailable_reason()`` says why);
the answer is kept for the life of the process.
"""

from __future__ import annotations

import ctypes
import logging
import threading

from tandem.kernels.native.builder import BuildError, build
from tandem.kernels.native.contract import bind

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def library() -> ctypes.CDLL | None:
    """The native kernels, built and loaded once per process; None where they cannot be."""
    if "lib" in _STATE:  # loaded (or refused) already: every kernel call asks
        return _STATE["lib"]  # type: ignore[return-value]
    with _LOCK:
        if "lib" not in _STATE:
            try:
                _STATE["lib"] = bind(ctypes.CDLL(str(build())))
                _STATE["reason"] = ""
            except (BuildError, OSError, AttributeError) as exc:
                _STATE["lib"] = None
                _STATE["reason"] = str(exc)
                log.info("native CPU kernels unavailable, using plain torch: %s", exc)
        return _STATE["lib"]  # type: ignore[return-value]


def unavailable_reason() -> str:
    """Why :func:`library` answered None ("" when it did not, or was not asked yet)."""
    library()
    return str(_STATE.get("reason", ""))
