"""Rotary position embedding: the rope scalings of the supported families, partial rotary."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from tandem.kernels import ops

if TYPE_CHECKING:  # models imports layers: keep this edge type-only
    from tandem.core.spec.rope import RopeSpec


def inv_freq(rotary_dim: int, rope: RopeSpec) -> Tensor:
    """Inverse frequencies [R/2] in fp32, after the rope scaling (R: the rotated dims)."""
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim
    if rope.type == "longrope":
        factors = torch.tensor(rope.ext_factors, dtype=torch.float32)
        if factors.shape[0] != exponent.shape[0]:
            raise ValueError(
                f"longrope factors must number rotary_dim / 2 = {exponent.shape[0]}, "
                f"got {factors.shape[0]}"
            )
        return 1.0 / (factors * rope.theta**exponent)
    freq = 1.0 / (rope.theta**exponent)  # [R/2]
    if rope.type == "linear":
        return freq / rope.factor
    if rope.type == "llama3":
        return _llama3(freq, rope)
    if rope.type == "yarn":
        return _yarn(freq, rotary_dim, rope)
    return freq


def _yarn(freq: Tensor, dim: int, rope: RopeSpec) -> Tensor:
    """YaRN: frequencies that turn fewer than ``beta_slow`` times over the original context
    are slowed by ``factor``, those turning more than ``beta_fast`` times kept, a linear ramp
    between (in the frequency index)."""

    def index_of(turns: float) -> float:  # the frequency index that turns `turns` times
        ratio = rope.original_max_position / (turns * 2 * math.pi)
        return dim * math.log(ratio) / (2 * math.log(rope.theta))

    low, high = index_of(rope.beta_fast), index_of(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: the frequency as it is, 0: slowed by factor
    return freq / rope.factor * (1 - keep) + freq * keep


def _llama3(freq: Tensor, rope: RopeSpec) -> Tensor:
    """Llama 3.1: long wavelengths slowed by ``factor``, short ones kept, a smooth ramp between."""
    old = rope.original_max_position
    low_wavelen = old / rope.low_freq_factor
    high_wavelen = old / rope.high_freq_factor
    wavelen = 2 * math.pi / freq
    scaled = torch.where(wavelen > low_wavelen, freq / rope.factor, freq)
    smooth = (old / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def cos_sin_cache(rotary_dim: int, max_position: int, rope: RopeSpec) -> Tensor:
    """[max_position, R] fp32: cos of the angles in the first half, sin in the second."""
    freq = inv_freq(rotary_dim, rope)  # [R/2]
    angles = torch.arange(max_position, dtype=torch.float32)[:, None] * freq[None, :]
    table = torch.cat((angles.cos(), angles.sin()), dim=-1)
    return table * rope.attention_factor if rope.attention_factor != 1.0 else table


class RotaryEmbedding(nn.Module):
    """Applies rope to q and k; the table is built lazily on the device it is used on.

    The table is not a parameter or buffer, so a model built on the meta device and
    moved with ``to_empty`` never carries an uninitialised copy of it. Where only the
    leading ``rotary_dim`` of each head rotates (partial rotary), the rest passes through.
    """

    def __init__(self, head_dim: int, max_position: int, rope: RopeSpec) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.rotary_dim = rope.rotary_dim(head_dim)
        if self.rotary_dim % 2 or self.rotary_dim <= 0:
            raise ValueError(
                f"the rotary dims (head_dim * partial_rotary_factor) must be even and > 0, "
                f"got {self.rotary_dim}"
            )
        self.max_position = max_position
        self.rope = rope
        self._table: Tensor | None = None

    def use(self, rope: RopeSpec, max_position: int | None = None) -> None:
        """Rotate with ``rope`` from now on, over ``max_position`` positions if given (the
        table is built again on next use)."""
        if rope.rotary_dim(self.head_dim) != self.rotary_dim:
            raise ValueError(
                f"rope must rotate {self.rotary_dim} dims of each head, "
                f"got {rope.rotary_dim(self.head_dim)}"
            )
        if max_position is not None and (not isinstance(max_position, int) or max_position < 1):
            raise ValueError(f"max_position must be a positive int, got {max_position!r}")
        if rope != self.rope or (max_position or self.max_position) != self.max_position:
            self._table = None
        self.rope = rope
        self.max_position = max_position or self.max_position

    def table(self, device: torch.device) -> Tensor:
        if self._table is None or self._table.device != device:
            self._table = cos_sin_cache(self.rotary_dim, self.max_position, self.rope).to(device)
        return self._table

    def forward(self, positions: Tensor, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        # positions: [T]; q: [T, H, D]; k: [T, KVH, D]
        # a table of rotary_dim columns: the op rotates those of each head, passes the rest
        return ops.rotary_embedding(positions, q, k, self.table(q.device))
