"""The interface every attention backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from torch import Tensor


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

    def op_names(self) -> list[str]:
        """Qualified names of the custom ops this backend calls."""
        return []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
