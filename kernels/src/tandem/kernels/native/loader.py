"""Loading the C kernels once per process, with their ctypes signatures.

``library()`` answers the loaded library or None (``unavailable_reason()`` says why);
the answer is kept for the life of the process.
"""

from __future__ import annotations

import ctypes
import logging
import threading

from tandem.kernels.native.builder import BuildError, build

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
_STATE: dict[str, object] = {}


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    fn = lib.tandem_paged_decode_f32
    fn.restype = ctypes.c_int
    fn.argtypes = [ptr] * 5 + [i64] * 6 + [ctypes.c_float, i64, ctypes.c_float, ptr]
    fn = lib.tandem_paged_prefill_f32
    fn.restype = ctypes.c_int
    fn.argtypes = [ptr] * 6 + [i64] * 7 + [ctypes.c_float, i64, ctypes.c_float, ptr]
    fn = lib.tandem_rope_decode_f32
    fn.restype = ctypes.c_int
    fn.argtypes = [ptr, i64, ptr, ptr, ptr, ptr, ptr, ptr, ptr] + [i64] * 6
    fn.argtypes += [ctypes.c_float, i64, ctypes.c_float, ptr]
    fn = lib.tandem_decode_stack_f32
    fn.restype = i64
    fn.argtypes = [ptr, i64, ptr, ptr] + [i64] * 6 + [ctypes.c_float] + [ptr] * 4 + [i64]
    fn.argtypes += [ptr, ptr, i64, i64, i64, ptr]
    lib.tandem_write_kv_f32.restype = None
    lib.tandem_write_kv_f32.argtypes = [ptr, i64, ptr, i64, ptr, i64, i64, ptr, ptr]
    lib.tandem_add_rms_norm_f32.restype = None
    lib.tandem_add_rms_norm_f32.argtypes = [ptr, ptr, ptr, ctypes.c_float, i64, i64, ptr, ptr]
    lib.tandem_silu_and_mul_f32.restype = None
    lib.tandem_silu_and_mul_f32.argtypes = [ptr, i64, i64, ptr]
    lib.tandem_greedy_f32.restype = i64
    lib.tandem_greedy_f32.argtypes = [ptr, i64, i64, ptr, ptr]
    lib.tandem_quantize_rows_u8.restype = i64
    lib.tandem_quantize_rows_u8.argtypes = [ptr, i64, i64, ctypes.c_float, ptr, i64, ctypes.c_int]
    lib.tandem_quantize_rows_u8.argtypes += [ptr] * 4
    lib.tandem_rescale_i32.restype = None
    lib.tandem_rescale_i32.argtypes = [ptr, i64, i64] + [ptr] * 6
    lib.tandem_linear_i8.restype = i64
    lib.tandem_linear_i8.argtypes = [ptr, i64, i64] + [ptr] * 4 + [i64, i64, ctypes.c_float, ptr]
    lib.tandem_linear_i8_available.restype = ctypes.c_int
    lib.tandem_linear_i8_available.argtypes = []
    lib.tandem_linear_f32.restype = ctypes.c_int
    lib.tandem_linear_f32.argtypes = [ptr, i64, i64, ptr, ptr, i64, ptr]
    lib.tandem_linear_f32_available.restype = ctypes.c_int
    lib.tandem_linear_f32_available.argtypes = []
    lib.tandem_linear_gguf.restype = ctypes.c_int
    lib.tandem_linear_gguf.argtypes = [ctypes.c_int, ptr, i64, i64, ptr, i64, ptr]
    lib.tandem_linear_gguf_f32.restype = ctypes.c_int
    lib.tandem_linear_gguf_f32.argtypes = [ctypes.c_int, ptr, i64, i64, ptr, i64, ptr]
    lib.tandem_linear_gguf_simd.restype = ctypes.c_int
    lib.tandem_gguf_block_bytes.restype = i64
    lib.tandem_gguf_block_bytes.argtypes = [ctypes.c_int]
    lib.tandem_gguf_decode_rows.restype = None
    lib.tandem_gguf_decode_rows.argtypes = [ctypes.c_int, ptr, i64, ptr, i64, i64, ptr]
    lib.tandem_linear_gguf_simd.argtypes = []
    lib.tandem_rotary_f32.restype = None
    lib.tandem_rotary_f32.argtypes = [ptr, ptr, i64, ptr, i64, i64, i64, ptr]
    return lib


def library() -> ctypes.CDLL | None:
    """The native kernels, built and loaded once per process; None where they cannot be."""
    if "lib" in _STATE:  # loaded (or refused) already: every kernel call asks
        return _STATE["lib"]  # type: ignore[return-value]
    with _LOCK:
        if "lib" not in _STATE:
            try:
                _STATE["lib"] = _bind(ctypes.CDLL(str(build())))
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
