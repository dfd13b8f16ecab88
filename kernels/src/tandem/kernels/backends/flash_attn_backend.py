"""flash-attn backend: varlen prefill and decode over the paged cache on CUDA.

``flash_attn`` is imported only when an op of this backend first runs; its ops
(``tandem::flash_attn_*``) are registered on first use too, so merely listing the
backends neither imports the library nor touches the op namespace. flash-attn's paged
mode wants caches laid out as ours, ``[N, S, KVH, D]``, with S a multiple of 256.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from torch import Tensor

from tandem.kernels.backends.base import AttentionBackend
from tandem.kernels.ops import attention_checks, cache
from tandem.kernels.ops.library import define, qualified

PAGE_MULTIPLE = 256
_OPS: dict[str, Any] = {}


def _register() -> dict[str, Any]:
    """Define the flash_attn ops once per process; later calls return them."""
    if _OPS:
        return _OPS

    @define("flash_attn_prefill_attention")
    def prefill(
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
        from flash_attn import flash_attn_varlen_func

        cu_k = torch.zeros(seq_lens.shape[0] + 1, dtype=torch.int32, device=q.device)
        cu_k[1:] = seq_lens.cumsum(0)
        q_lens = cu_seqlens_q[1:] - cu_seqlens_q[:-1]
        return flash_attn_varlen_func(
            q,
            k_cache,
            v_cache,
            cu_seqlens_q=cu_seqlens_q.int(),
            cu_seqlens_k=cu_k,
            max_seqlen_q=int(q_lens.max()),
            max_seqlen_k=int(seq_lens.max()),
            softmax_scale=scale,
            causal=True,
            block_table=block_tables.int(),
            window_size=_window_size(window),
            softcap=softcap,
        )

    @prefill.register_fake
    def _(q, k, v, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, *extra):
        return torch.empty_like(q)

    @define("flash_attn_decode_attention")
    def decode(
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        seq_lens: Tensor,
        block_tables: Tensor,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
    ) -> Tensor:
        from flash_attn import flash_attn_with_kvcache

        out = flash_attn_with_kvcache(
            q.unsqueeze(1),
            k_cache,
            v_cache,  # q: [B, 1, H, D]
            cache_seqlens=seq_lens.int(),
            block_table=block_tables.int(),
            softmax_scale=scale,
            causal=True,
            window_size=_window_size(window),
            softcap=softcap,
        )
        return out.squeeze(1)

    @decode.register_fake
    def _(q, k_cache, v_cache, seq_lens, block_tables, scale, *extra) -> Tensor:
        return torch.empty_like(q)

    _OPS.update(prefill=prefill, decode=decode)
    return _OPS


def _window_size(window: int) -> tuple[int, int]:
    """flash-attn's (left, right) keys beside the query's own: ours sees the query and the
    window - 1 keys before it; -1 is unbounded."""
    return (window - 1, 0) if window > 0 else (-1, -1)


def _check_device(q: Tensor, k_cache: Tensor) -> None:
    if q.device.type != "cuda":
        raise ValueError(f"the flash_attn backend needs CUDA tensors, got q on {q.device}")
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"the flash_attn backend needs q in (float16, bfloat16), got {q.dtype}")
    if k_cache.shape[1] % PAGE_MULTIPLE != 0:
        raise ValueError(
            f"the flash_attn backend needs a block size that is a multiple of "
            f"{PAGE_MULTIPLE}, got k_cache.shape[1] = {k_cache.shape[1]}"
        )


class FlashAttnBackend(AttentionBackend):
    name = "flash_attn"

    @classmethod
    def is_available(cls) -> bool:
        return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None

    def write_kv_cache(
        self, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor
    ) -> None:
        cache.check_write(k, v, k_cache, v_cache, slot_mapping)
        torch.ops.tandem.torch_write_kv_cache(k, v, k_cache, v_cache, slot_mapping)

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
        tables = (cu_seqlens_q, seq_lens, block_tables)
        attention_checks.check_prefill(q, k, v, k_cache, v_cache, *tables, scale, window, softcap)
        _check_device(q, k_cache)
        extra = (float(scale), int(window), float(softcap))
        return _register()["prefill"](q, k, v, k_cache, v_cache, *tables, *extra)

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
        attention_checks.check_decode(
            q, k_cache, v_cache, seq_lens, block_tables, scale, window, softcap
        )
        _check_device(q, k_cache)
        extra = (float(scale), int(window), float(softcap))
        return _register()["decode"](q, k_cache, v_cache, seq_lens, block_tables, *extra)

    def op_names(self) -> list[str]:
        return [
            qualified("torch_write_kv_cache"),
            qualified("flash_attn_prefill_attention"),
            qualified("flash_attn_decode_attention"),
        ]
