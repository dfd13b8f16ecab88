"""glibc malloc thresholds for a process that runs the model on the CPU.

glibc serves an allocation above a threshold (adapting between 128 KiB and 32 MiB) with
an mmap of its own and gives freed memory at the top of its heap back to the system. A
forward pass allocates and frees activations of several MiB per layer, so each step
faults fresh zeroed pages in again: ~140k page faults (0.5 s) in the first run of
``benchmarks/throughput.py``'s workload and tens of thousands in every later one. Fixed
thresholds keep those buffers in the heap, which then stays at the largest step's
footprint (tens of MiB for the default token budget) instead of shrinking between steps.

``TANDEM_CPU_MALLOC=system`` leaves glibc's own behaviour; elsewhere than glibc this
does nothing.

:func:`release_free_heap` hands the heap's free memory back once a process is done with a
large transient (a model loaded, a tokenizer parsed from its JSON): glibc keeps what was
freed below memory still in use, so without it a process stays at its peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

from tandem.core import envs

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 << 20  # allocations above this still get their own mmap
TRIM_THRESHOLD = 256 << 20  # free memory kept at the top of the heap before trimming

_STATE = {"set": False}  # mutated, never rebound: the thresholds are process-wide


def keep_activations_in_heap() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (once); True once set."""
    choice = envs.TANDEM_CPU_MALLOC  # read (and validated) on every call
    if _STATE["set"] or choice == "system":
        return _STATE["set"]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = ok and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    if not ok:
        log.info("mallopt refused the heap thresholds; glibc keeps its defaults")
    _STATE["set"] = ok
    return ok


def release_free_heap() -> bool:
    """Return the free memory of glibc's heap to the system (``malloc_trim``), after the
    garbage collector has freed what it can; False where there is no glibc."""
    import gc

    gc.collect()
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True
