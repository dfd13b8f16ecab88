"""The plain-torch backend: always available, runs on any device torch supports."""

from __future__ import annotations

from torch import Tensor

from tandem.kernels import ops
from tandem.kernels.backends.base import AttentionBackend


class TorchBackend(AttentionBackend):
    name = "torch"

    @classmethod
    def is_available(cls) -> bool:
        return True

    def write_kv_cache(
        self, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor
    ) -> None:
        ops.write_kv_cache(k, v, k_cache, v_cache, slot_mapping)

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
        return ops.prefill_attention(
            q, k, v, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, window, softcap
        )

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
        return ops.decode_attention(
            q, k_cache, v_cache, seq_lens, block_tables, scale, window, softcap
        )

    def op_names(self) -> list[str]:
        return [
            "tandem::torch_write_kv_cache",
            "tandem::torch_prefill_attention",
            "tandem::torch_decode_attention",
        ]
