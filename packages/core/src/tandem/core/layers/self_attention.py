"""Self-attention of a decoder layer: one fused q/k/v projection, optional q/k norms, rope,
paged attention (windowed or soft-capped where the spec says), the output projection.

Under tensor parallelism a rank holds its share of the query heads and the KV heads they
read (:func:`~tandem.core.parallel.partition.kv_head_range`), so attention itself runs
unchanged on fewer heads; the output projection sums the ranks' partial outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from tandem.core.layers.attention import PagedAttention
from tandem.core.layers.attention_metadata import AttentionMetadata
from tandem.core.layers.linear import Linear
from tandem.core.layers.norm import RMSNorm
from tandem.core.layers.parallel import RowParallelLinear
from tandem.core.layers.rotary import RotaryEmbedding
from tandem.core.parallel.group import TensorParallel
from tandem.core.parallel.layout import Layout, split
from tandem.core.parallel.partition import even_range, kv_head_range
from tandem.kernels.backends import AttentionBackend

if TYPE_CHECKING:  # models imports layers: keep this edge type-only
    from tandem.core.spec.model import AttentionSpec

KVCache = tuple[Tensor, Tensor]


class SelfAttention(nn.Module):
    def __init__(
        self,
        spec: AttentionSpec,
        hidden_size: int,
        rotary: RotaryEmbedding,
        eps: float,
        window: int | None,
        dtype: torch.dtype | None,
        tp: TensorParallel | None = None,
    ) -> None:
        super().__init__()
        h, kvh, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
        if tp is not None:  # this rank's heads
            k0, k1 = kv_head_range(kvh, tp.size, tp.rank)
            h, kvh = h // tp.size, k1 - k0
            self.tp_layouts = _qkv_layouts(spec, hidden_size, tp)
        self.sizes = (h * d, kvh * d, kvh * d)
        self.shape = (h, kvh, d)
        self.qk_norm = spec.qk_norm
        self.qkv_proj = Linear(hidden_size, sum(self.sizes), bias=spec.qkv_bias, dtype=dtype)
        if tp is None:
            self.o_proj = Linear(h * d, hidden_size, bias=spec.o_bias, dtype=dtype)
        else:
            full = spec.num_heads * d
            self.o_proj = RowParallelLinear(full, hidden_size, spec.o_bias, dtype, tp)
        if spec.qk_norm != "none":  # over each head, or over the whole projection
            per_head = spec.qk_norm == "head"
            self.q_norm = RMSNorm(d if per_head else h * d, eps, dtype)
            self.k_norm = RMSNorm(d if per_head else kvh * d, eps, dtype)
        self.rotary = rotary
        self.attn = PagedAttention(h, kvh, d, spec.scale, window, spec.softcap)
        self.local = window is not None  # reads the local layers' pool where there is one
        # a step of decodes only goes to the backend's fused rope + K/V write + decode
        self.fused_decode = spec.qk_norm == "none" and rotary.rotary_dim == d

    def forward(
        self,
        positions: Tensor,
        x: Tensor,
        cache: KVCache,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> Tensor:
        # x: [T, C]
        if self.local and meta.local is not None:
            meta = meta.local
        t = x.shape[0]
        h, kvh, d = self.shape
        qkv = self.qkv_proj(x)  # [T, (H + 2 KVH) * D]
        if self.fused_decode and meta.num_prefill_tokens == 0 and t:
            out = self.attn.rope_decode(
                qkv, positions, self.rotary.table(x.device), cache, meta, backend
            )
            return self.o_proj(out.reshape(t, h * d))
        q, k, v = qkv.split(self.sizes, dim=-1)
        if self.qk_norm == "proj":  # q: [T, H*D]
            q, _ = self.q_norm(q.contiguous())
            k, _ = self.k_norm(k.contiguous())
        q, k = q.reshape(t, h, d), k.reshape(t, kvh, d)
        if self.qk_norm == "head":  # q: [T, H, D]
            q, _ = self.q_norm(q.contiguous())
            k, _ = self.k_norm(k.contiguous())
        # without q/k norms these are views into the fused projection: rotary reads them in place
        q, k = self.rotary(positions, q, k)
        v = v.reshape(t, kvh, d)
        out = self.attn(q, k, v, cache[0], cache[1], meta, backend)  # [T, H, D]
        return self.o_proj(out.reshape(t, h * d))


def _qkv_layouts(spec: AttentionSpec, hidden_size: int, tp: TensorParallel) -> dict[str, Layout]:
    """This rank's rows of the fused projection: its query heads, then its KV heads'
    keys, then their values (each a run of the full q | k | v rows)."""
    h, kvh, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
    q0, q1 = even_range(h, tp.size, tp.rank)
    k0, k1 = kv_head_range(kvh, tp.size, tp.rank)
    k, v = h + k0, h + kvh + k0  # where this rank's keys and values start, in heads
    n = k1 - k0
    rows = ((q0 * d, q1 * d), (k * d, (k + n) * d), (v * d, (v + n) * d))
    full = (h + 2 * kvh) * d
    return {
        "qkv_proj.weight": split((full, hidden_size), 0, *rows),
        "qkv_proj.bias": split((full,), 0, *rows),
    }
