"""C kernels for the CPU, built on first use and called through ctypes.

``library()`` answers the loaded library or None (``unavailable_reason()`` says why).
Every kernel entry answers None where C cannot take a call, and its caller falls back
to the plain-torch kernel.
"""

from __future__ import annotations

from tandem.kernels.native import linear_f32, linear_i8
from tandem.kernels.native.attention import paged_decode, paged_prefill, rope_decode, write_kv
from tandem.kernels.native.builder import BuildError
from tandem.kernels.native.elementwise import (
    add_rms_norm,
    gelu_tanh_and_mul,
    greedy,
    quantize_rows,
    rescale,
    rotary,
    silu_and_mul,
)
from tandem.kernels.native.loader import library, unavailable_reason

__all__ = [
    "BuildError",
    "add_rms_norm",
    "gelu_tanh_and_mul",
    "greedy",
    "library",
    "linear_f32",
    "linear_i8",
    "paged_decode",
    "paged_prefill",
    "quantize_rows",
    "rescale",
    "rope_decode",
    "rotary",
    "silu_and_mul",
    "unavailable_reason",
    "write_kv",
]
