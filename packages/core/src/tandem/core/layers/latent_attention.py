"""Multi-head latent attention (DeepSeek-V2/V3) over a paged cache of latents.

Each token is reduced to a latent ``c`` (``kv_lora_rank`` values, after its RMSNorm) and
one rotated position key ``k_pe`` shared by every head; the cache keeps that row and
nothing else (:mod:`tandem.kernels.ops.latent`). Keys and values are never expanded:
each head's non-rotary query is taken into the latent's basis through its slice of
``kv_b_proj`` (q . (W_uk c) = (q W_uk) . c), and the attended latent is taken out to the
head's value through the other slice.

Under tensor parallelism a rank holds its run of the heads: their rows of q's projection
(column parallel) and of ``kv_b_proj``, and their columns of the output projection (row
parallel: the ranks' partial outputs are summed). q's own latent, the kv latent and its
norm are whole on every rank, so every rank writes the same latent row into its own
cache (one KV head held by every rank, as a plain model's with fewer KV heads than ranks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from tandem.core.layers.attention_metadata import AttentionMetadata
from tandem.core.layers.linear import Linear
from tandem.core.layers.norm import RMSNorm
from tandem.core.layers.parallel import RowParallelLinear
from tandem.core.layers.rotary import RotaryEmbedding
from tandem.core.layers.weight_form import GgufBlocks
from tandem.core.parallel.group import TensorParallel
from tandem.core.parallel.layout import Layout, split
from tandem.core.parallel.partition import even_range
from tandem.kernels import ops as kernel_ops
from tandem.kernels.backends import AttentionBackend
from tandem.kernels.gguf_blocks import QuantWeight
from tandem.kernels.native import latent as native_latent
from tandem.kernels.ops.latent import C_TOKENS

if TYPE_CHECKING:  # models imports layers: keep this edge type-only
    from tandem.core.spec.model import AttentionSpec

KVCache = tuple[Tensor, Tensor]


class Matrix(nn.Module):
    """A weight read in slices, never multiplied as a whole (no packed copy)."""

    def __init__(self, rows: int, cols: int, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, cols, dtype=dtype), requires_grad=False)


def pairs_to_halves(rows: int, start: int, dim: int, every: int) -> Tensor:
    """The row order that takes rows ``start .. start + dim`` of every block of ``every``
    rows from pairs (x0, x1), (x2, x3) ... to x0, x2, ..., x1, x3, ...: rotate-half rope on
    the reordered rows is the pairwise rope of the checkpoint, and q . k is unchanged."""
    perm = torch.cat((torch.arange(0, dim, 2), torch.arange(1, dim, 2)))
    order = torch.arange(rows)
    for base in range(0, rows, every):
        order[base + start : base + start + dim] = base + start + perm
    return order


def deinterleave(weight: Tensor, start: int, dim: int, every: int) -> None:
    """Reorder ``weight``'s rows in place (see :func:`pairs_to_halves`)."""
    order = pairs_to_halves(weight.shape[0], start, dim, every).to(weight.device)
    with torch.no_grad():
        weight.copy_(weight[order])


def _deinterleave_linear(layer: Linear, start: int, dim: int, every: int) -> None:
    """:func:`deinterleave` on a projection's rows: its weight (or its GGUF blocks, whose
    rows move whole) and bias."""
    quant = layer.form.blocks if isinstance(layer.form, GgufBlocks) else None
    if quant is None:
        deinterleave(layer.weight, start, dim, every)
    elif isinstance(quant, QuantWeight):
        order = pairs_to_halves(quant.n, start, dim, every).to(quant.data.device)
        layer.use_quantized(
            QuantWeight(quant.data[order].contiguous(), quant.qtype, quant.n, quant.k)
        )
    else:
        raise ValueError(f"rows of a weight kept in several formats ({quant.name}) do not move")
    if layer.bias is not None:
        deinterleave(layer.bias[:, None], start, dim, every)


class LatentAttention(nn.Module):
    def __init__(
        self,
        spec: AttentionSpec,
        hidden_size: int,
        rotary: RotaryEmbedding,
        eps: float,
        dtype: torch.dtype | None,
        tp: TensorParallel | None = None,
    ) -> None:
        super().__init__()
        lat = spec.latent
        assert lat is not None
        h, n, p, v, r = (
            spec.num_heads,
            lat.qk_nope_head_dim,
            lat.qk_rope_head_dim,
            lat.v_head_dim,
            lat.kv_lora_rank,
        )
        if tp is not None:  # this rank's heads
            self.tp_layouts = _head_layouts(spec, hidden_size, tp)
            h //= tp.size
        self.dims = (h, n, p, v, r)
        self.scale = spec.scale
        self.interleaved = lat.interleaved
        bias = spec.qkv_bias
        if lat.q_lora_rank is None:
            self.q_proj = Linear(hidden_size, h * (n + p), bias=False, dtype=dtype)
        else:
            self.q_a_proj = Linear(hidden_size, lat.q_lora_rank, bias=bias, dtype=dtype)
            self.q_a_layernorm = RMSNorm(lat.q_lora_rank, eps, dtype)
            self.q_b_proj = Linear(lat.q_lora_rank, h * (n + p), bias=False, dtype=dtype)
        self.kv_a_proj_with_mqa = Linear(hidden_size, r + p, bias=bias, dtype=dtype)
        self.kv_a_layernorm = RMSNorm(r, eps, dtype)
        self.kv_b_proj = Matrix(h * (n + v), r, dtype)
        if tp is None:
            self.o_proj = Linear(h * v, hidden_size, bias=spec.o_bias, dtype=dtype)
        else:
            full = spec.num_heads * v
            self.o_proj = RowParallelLinear(full, hidden_size, spec.o_bias, dtype, tp)
        self.rotary = rotary
        self.local = False  # no window: the global pool's blocks (as a windowless layer's)

    def finish_loading(self) -> None:
        """The checkpoint's rotary rows in pairs -> halves (see :func:`deinterleave`)."""
        if not self.interleaved:
            return
        _, n, p, _, r = self.dims
        q = self.q_proj if hasattr(self, "q_proj") else self.q_b_proj
        _deinterleave_linear(q, n, p, n + p)
        _deinterleave_linear(self.kv_a_proj_with_mqa, r, p, r + p)

    def _query(self, x: Tensor) -> Tensor:
        # x: [T, C] -> [T, H*(N+P)]
        if hasattr(self, "q_proj"):
            return self.q_proj(x)
        q, _ = self.q_a_layernorm(self.q_a_proj(x))
        return self.q_b_proj(q)

    def forward(
        self,
        positions: Tensor,
        x: Tensor,
        cache: KVCache,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> Tensor:
        # x: [T, C]
        t = x.shape[0]
        h, n, p, _, r = self.dims
        proj = self._query(x)  # [T, H*(N+P)]
        q_nope, q_pe = proj.view(t, h, n + p).split([n, p], dim=-1)
        c, k_pe = self.kv_a_proj_with_mqa(x).split([r, p], dim=-1)
        c, _ = self.kv_a_layernorm(c.contiguous())  # [T, R]
        q_pe, k_pe = self.rotary(positions, q_pe.contiguous(), k_pe.reshape(t, 1, p).contiguous())
        row = torch.cat((c, k_pe[:, 0]), dim=-1)  # [T, R+P]: what the cache keeps
        half = (r + p) // 2
        backend.write_kv_cache(
            row[:, None, :half], row[:, None, half:], cache[0], cache[1], meta.slot_mapping
        )
        q = self._latent_query(proj, q_nope, q_pe)  # [T, H, R+P]
        o_lat = self._attend(q, cache, meta)  # [T, H, R]
        return self.o_proj(self._values(o_lat))

    def _latent_query(self, proj: Tensor, q_nope: Tensor, q_pe: Tensor) -> Tensor:
        """Each head's q_nope [T, H, N] (a view into ``proj``, the query's projection) in
        the latent's basis, beside its rotated q_pe [T, H, P] -> [T, H, R+P]."""
        h, n, _, v, r = self.dims
        kv_b = self.kv_b_proj.weight
        q = native_latent.query(proj, kv_b, self.dims) if len(proj) <= C_TOKENS else None
        if q is not None:  # fp32 on the CPU: C, as the decode stack runs it
            q[..., r:] = q_pe
            return q
        w = kv_b.view(h, n + v, r)
        q_lat = torch.bmm(q_nope.transpose(0, 1), w[:, :n])  # [H, T, R]
        return torch.cat((q_lat.transpose(0, 1), q_pe), dim=-1)

    def _values(self, o_lat: Tensor) -> Tensor:
        """The attended latent [T, H, R] through each head's value rows -> [T, H V]."""
        h, n, _, v, r = self.dims
        out = None
        if len(o_lat) <= C_TOKENS:
            out = native_latent.value(o_lat, self.kv_b_proj.weight, self.dims)
        if out is not None:
            return out
        w = self.kv_b_proj.weight.view(h, n + v, r)
        out = torch.bmm(o_lat.transpose(0, 1), w[:, n:].transpose(1, 2))  # [H, T, V]
        return out.transpose(0, 1).reshape(o_lat.shape[0], h * v)

    def _attend(self, q: Tensor, cache: KVCache, meta: AttentionMetadata) -> Tensor:
        # q: [T, H, W] (prefill tokens first, then one per decoding sequence) -> [T, H, R]
        r = self.dims[4]
        p = meta.num_prefill_tokens
        out = q.new_empty(*q.shape[:2], r)
        if meta.num_prefills:
            tables = (meta.prefill_cu_seqlens_q, meta.prefill_seq_lens, meta.prefill_block_tables)
            out[:p] = kernel_ops.latent_prefill(q[:p], *cache, *tables, self.scale, r)
        if meta.num_decodes:
            tables = (meta.decode_seq_lens, meta.decode_block_tables)
            out[p:] = kernel_ops.latent_decode(q[p:], *cache, *tables, self.scale, r)
        return out


def _head_layouts(spec: AttentionSpec, hidden_size: int, tp: TensorParallel) -> dict[str, Layout]:
    """This rank's rows of q's projection (``q_proj``, or ``q_b_proj`` after q's latent)
    and of ``kv_b_proj``: its heads' runs of each (heads are whole runs of rows in both)."""
    lat = spec.latent
    assert lat is not None
    h, n, p, v = spec.num_heads, lat.qk_nope_head_dim, lat.qk_rope_head_dim, lat.v_head_dim
    h0, h1 = even_range(h, tp.size, tp.rank)
    q_in = hidden_size if lat.q_lora_rank is None else lat.q_lora_rank
    q_name = "q_proj" if lat.q_lora_rank is None else "q_b_proj"
    return {
        f"{q_name}.weight": split((h * (n + p), q_in), 0, (h0 * (n + p), h1 * (n + p))),
        "kv_b_proj.weight": split((h * (n + v), lat.kv_lora_rank), 0, (h0 * (n + v), h1 * (n + v))),
    }
