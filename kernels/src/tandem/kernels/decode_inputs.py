"""What a fused step of one layer reads (a step of decodes, or of a few tokens laid out as
a prefill), in two parts: the layer's own attention settings (fixed when the model is
built) and the step's tensors (the same for every layer of a step). Plain data, no torch
ops: the backends, the C wrappers and the checks all take these two instead of a dozen
loose arguments."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True, slots=True)
class AttentionLayer:
    """One layer's attention: ``heads`` = (H, KVH) query and key/value heads, the score
    ``scale``, a sliding ``window`` (0: none) and a score ``softcap`` (0.0: none)."""

    heads: tuple[int, int]
    scale: float
    window: int = 0
    softcap: float = 0.0


@dataclass(frozen=True, slots=True)
class DecodeStep:
    """A step's tensors: B sequences of one new token each (T == B), or, laid out as a
    prefill, T new tokens in all (``ops.decode_step.check_rope_decode``); M blocks a table."""

    positions: Tensor  # [T] int, each new token's position
    cos_sin: Tensor  # [P, D] rope table, cos | sin halves
    slot_mapping: Tensor  # [T] int, block * block size + offset (-1: write nothing)
    seq_lens: Tensor  # [B] int32, context + the new tokens
    block_tables: Tensor  # [B, M] int32

    def tensors(self) -> tuple[Tensor, ...]:
        return (self.positions, self.cos_sin, self.slot_mapping, self.seq_lens, self.block_tables)
