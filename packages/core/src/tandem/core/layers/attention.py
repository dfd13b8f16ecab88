"""Paged attention over a batch laid out prefills first, then decodes."""

from __future__ import annotations

from torch import Tensor, nn

from tandem.core.layers.attention_metadata import AttentionMetadata
from tandem.kernels.backends import AttentionBackend
from tandem.kernels.decode_inputs import AttentionLayer, DecodeStep

KVCache = tuple[Tensor, Tensor]


class PagedAttention(nn.Module):
    """Writes the step's K/V into the paged cache, then attends over it.

    The first ``num_prefill_tokens`` tokens go through varlen prefill attention (which
    also sees any context already cached: chunked prefill, prefix hits); the rest are
    one token per decoding sequence. ``window`` (a query sees its last ``window`` keys)
    and ``softcap`` (scores capped by ``softcap * tanh(s / softcap)``) are this layer's.
    """

    def __init__(
        self,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        scale: float,
        window: int | None = None,
        softcap: float | None = None,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.scale = scale
        # the backends' spelling: 0 for none
        self.extra = {"window": window or 0, "softcap": softcap or 0.0}
        if not (window or softcap):
            self.extra = {}
        self.layer = AttentionLayer((num_heads, num_kv_heads), scale, window or 0, softcap or 0.0)

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> Tensor:
        # q: [T, H, D]; k, v: [T, KVH, D]; k_cache, v_cache: [N, S, KVH, D] -> [T, H, D]
        backend.write_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping)
        p = meta.num_prefill_tokens
        if meta.num_decodes == 0:
            return backend.prefill(
                q,
                k,
                v,
                k_cache,
                v_cache,
                meta.prefill_cu_seqlens_q,
                meta.prefill_seq_lens,
                meta.prefill_block_tables,
                self.scale,
                **self.extra,
            )
        if meta.num_prefills == 0:
            return backend.decode(
                q,
                k_cache,
                v_cache,
                meta.decode_seq_lens,
                meta.decode_block_tables,
                self.scale,
                **self.extra,
            )
        out = q.new_empty(q.shape)
        out[:p] = backend.prefill(
            q[:p],
            k[:p],
            v[:p],
            k_cache,
            v_cache,
            meta.prefill_cu_seqlens_q,
            meta.prefill_seq_lens,
            meta.prefill_block_tables,
            self.scale,
            **self.extra,
        )
        out[p:] = backend.decode(
            q[p:],
            k_cache,
            v_cache,
            meta.decode_seq_lens,
            meta.decode_block_tables,
            self.scale,
            **self.extra,
        )
        return out

    def rope_decode(
        self,
        qkv: Tensor,
        positions: Tensor,
        cos_sin: Tensor,
        cache: KVCache,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> Tensor:
        """A step of decodes only, from the fused q | k | v projection: rope, the K/V
        write and attention in the backend's one call. qkv: [B, (H + 2 KVH) * D] -> [B, H, D]."""
        step = DecodeStep(
            positions, cos_sin, meta.slot_mapping, meta.decode_seq_lens, meta.decode_block_tables
        )
        return backend.rope_decode(qkv, self.layer, step, cache[0], cache[1])
