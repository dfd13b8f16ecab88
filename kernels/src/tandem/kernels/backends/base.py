"""The interface every attention backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from torch import Tensor

from tandem.kernels import ops
from tandem.kernels.decode_inputs import AttentionLayer, DecodeStep


class AttentionBackend(ABC):
    """Attention over the paged KV cache for one kind of hardware/library.

    The argument conventions are those of :mod:`tandem.kernels.reference`. A backend
    must be cheap to construct; heavy imports happen in :meth:`is_available` checks
    that do not import, or on first use.
    """

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def is_available(cls) -> bool:
        """Whether this backend can run here (without importing optional libraries)."""

    @abstractmethod
    def write_kv_cache(
        self, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor
    ) -> None:
        """Store k, v: [T, KVH, D] into the caches at ``slot_mapping``: [T] (-1 = skip)."""

    @abstractmethod
    def prefill(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        cu_seqlens_q: Tensor,
        seq_lens: Tensor,
        block_tables: Tensor,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
    ) -> Tensor:
        """Varlen causal attention of new tokens q: [T, H, D] over the cache -> [T, H, D].

        ``window`` > 0: each query sees only its last ``window`` keys (itself included);
        ``softcap`` > 0: each scaled score s becomes softcap * tanh(s / softcap).
        """

    @abstractmethod
    def decode(
        self,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        seq_lens: Tensor,
        block_tables: Tensor,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
    ) -> Tensor:
        """One new token per sequence, q: [B, H, D] -> [B, H, D] (window, softcap: as
        :meth:`prefill`)."""

    def rope_decode(
        self,
        qkv: Tensor,
        layer: AttentionLayer,
        step: DecodeStep,
        k_cache: Tensor,
        v_cache: Tensor,
    ) -> Tensor:
        """One layer's attention for a step of decodes only, from its fused projection
        qkv: [B, (H + 2 KVH) * D] (``layer.heads`` = (H, KVH)): rotate-half rope on q and
        k at ``step.positions``, k and v into the caches at ``step.slot_mapping``, then
        :meth:`decode` -> [B, H, D]. A backend may fuse the three (a decode step of a
        small model is mostly the calls between its kernels); this one calls them in turn."""
        H, KVH = layer.heads
        B, D = qkv.shape[0], k_cache.shape[-1]
        q, k, v = qkv.split((H * D, KVH * D, KVH * D), dim=-1)
        q, k = ops.rotary_embedding(
            step.positions, q.reshape(B, H, D), k.reshape(B, KVH, D), step.cos_sin
        )
        self.write_kv_cache(k, v.reshape(B, KVH, D), k_cache, v_cache, step.slot_mapping)
        return self.decode(
            q, k_cache, v_cache, step.seq_lens, step.block_tables, layer.scale, layer.window,
            layer.softcap,
        )  # fmt: skip

    def op_names(self) -> list[str]:
        """Qualified names of the custom ops this backend calls."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
