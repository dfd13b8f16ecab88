"""Counter-based random numbers for seeded sampling, identical in every engine.

A sample's randomness is a pure function of ``(seed, counter, token id)``: no generator
state, so the same request draws the same token whatever else is in the batch, in
whichever engine, process or order it runs. The hash is splitmix64 done in int64 torch
arithmetic (multiplication wraps modulo 2**64; logical right shifts are arithmetic
shifts followed by a mask).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels import checks

_MASK64 = (1 << 64) - 1


def _signed(c: int) -> int:
    # a 64-bit unsigned constant as the int64 with the same bits
    return c - (1 << 64) if c >= 1 << 63 else c


GAMMA = _signed(0x9E3779B97F4A7C15)
_M1 = _signed(0xBF58476D1CE4E5B9)
_M2 = _signed(0x94D049BB133111EB)
_COUNTER_SALT = _signed(0xD1B54A32D192ED03)


def _shr(x: Tensor, s: int) -> Tensor:
    # logical right shift of int64 bits
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix(x: Tensor) -> Tensor:
    """splitmix64's finaliser on int64 bit patterns (elementwise, any shape)."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def mix_int(x: int) -> int:
    """Python-int twin of :func:`mix` on unsigned 64-bit values (the reference)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def stream_keys(seeds: Tensor, counters: Tensor) -> Tensor:
    """One 64-bit key per row from (seed, counter): [B] int64."""
    return mix(seeds ^ mix(counters * _COUNTER_SALT + GAMMA))


def seeded_uniform(seeds: Tensor, counters: Tensor, vocab_size: int) -> Tensor:
    """Uniform numbers in the open interval (0, 1): [B, vocab_size] float64.

    Entry ``[b, j]`` depends only on ``(seeds[b], counters[b], j)``: it is splitmix64's
    ``j+1``-th output for the stream keyed by the row, whose top 52 bits ``m`` give
    ``(m + 0.5) / 2**52`` (exact in float64, never 0 or 1).
    """
    s = checks.tensor("seeds", seeds, 1, (torch.int64,))
    c = checks.tensor("counters", counters, 1, (torch.int64,))
    checks.dim("counters", c, 0, s.shape[0], "seeds.shape[0]")
    checks.same_device(seeds=s, counters=c)
    checks.integer("vocab_size", vocab_size, 1)
    keys = stream_keys(s, c)  # [B]
    steps = torch.arange(1, vocab_size + 1, dtype=torch.int64, device=s.device) * GAMMA
    bits = mix(keys[:, None] + steps[None, :])  # [B, V]
    mantissa = _shr(bits, 12).to(torch.float64)
    return mantissa.add_(0.5).mul_(2.0**-52)


def derive_seed(seed: int, index: int) -> int:
    """The seed of the ``index``-th of the ``n`` samples of a request.

    ``index`` 0 keeps ``seed`` itself, so a request with ``n=1`` and one with ``n>1``
    share their first sample. Index ``i > 0`` maps to splitmix64 of the seed and the
    index, reduced to 63 bits: non-negative, fits an int64, differs per index.
    """
    checks.integer("seed", seed, 0, 1 << 63)
    checks.integer("index", index, 0)
    if index == 0:
        return seed
    return mix_int(seed ^ mix_int(index * 0x9E3779B97F4A7C15)) & ((1 << 63) - 1)
