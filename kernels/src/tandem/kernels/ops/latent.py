"""Multi-head latent attention (DeepSeek's MLA) over a paged cache of latents.

The cache holds one row per token: its compressed latent ``c`` (``rank`` values) then its
rotated position key ``k_pe``, ``W = rank + rope`` values in all, split over the two
halves of a layer's paged cache (the K half holds the first ``W / 2``, the V half the
rest): an engine that allocates K and V of head size ``W / 2`` and one KV head stores
exactly the latent, nothing more. Each query head comes with its projection into the
latent space (``q_nope`` absorbed into ``c``'s basis) then its rotated part, ``W`` values:
scores are ``q . row``, the output is the probability-weighted sum of the rows' ``c``
(``rank`` values per head); the caller maps it back to value space.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.native import latent as native
from tandem.kernels.ops.attention import SCORE_LIMIT, _bias, gather
from tandem.kernels.ops.library import call, define

# steps of at most this many tokens run latent.c on fp32 CPU tensors (the decode stack's
# steps among them: it runs the same C); a longer prefill runs torch's batched products,
# faster over many rows
C_TOKENS = 256


def latent_rows(k_cache: Tensor, v_cache: Tensor, table: Tensor, length: int) -> Tensor:
    """A sequence's first ``length`` latent rows: [length, W] (the halves side by side)."""
    k = gather(k_cache, table, length)[:, 0]  # [length, W/2]
    v = gather(v_cache, table, length)[:, 0]
    return torch.cat((k, v), dim=-1)


def _attend(q: Tensor, rows: Tensor, scale: float, rank: int) -> Tensor:
    """q: [Q, H, W], the last Q positions of ``rows`` [L, W] -> [Q, H, rank]."""
    Q, H, W = q.shape
    L = rows.shape[0]
    out = q.new_empty(Q, H, rank)
    step = max(1, SCORE_LIMIT // (H * L))
    for lo in range(0, Q, step):
        hi = min(Q, lo + step)
        n = hi - lo
        bias = _bias(L - Q + lo, n, L, 0, q.dtype, q.device)[:, None, :]  # [n, 1, L]
        scores = torch.matmul(q[lo:hi].reshape(n * H, W), rows.t()).view(n, H, L)
        probs = scores.mul_(scale).add_(bias).float().softmax(-1).to(q.dtype)
        out[lo:hi] = torch.matmul(probs.view(n * H, L), rows[:, :rank]).view(n, H, rank)
    return out


@define("torch_latent_prefill")
def _latent_prefill(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    rank: int,
) -> Tensor:
    if q.shape[0] <= C_TOKENS:  # fp32 on the CPU: one pass in C
        done = native.attend(q, k_cache, v_cache, seq_lens, block_tables, cu_seqlens_q, scale, rank)
        if done is not None:
            return done
    out = q.new_empty(*q.shape[:2], rank)
    cu, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    for b, L in enumerate(lens):
        rows = latent_rows(k_cache, v_cache, block_tables[b], L).to(q.dtype)
        out[cu[b] : cu[b + 1]] = _attend(q[cu[b] : cu[b + 1]], rows, scale, rank)
    return out


@_latent_prefill.register_fake
def _(q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, rank) -> Tensor:
    return q.new_empty(*q.shape[:2], rank)


@define("torch_latent_decode")
def _latent_decode(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    rank: int,
) -> Tensor:
    if q.shape[0] <= C_TOKENS:
        done = native.attend(q, k_cache, v_cache, seq_lens, block_tables, None, scale, rank)
        if done is not None:
            return done
    out = q.new_empty(*q.shape[:2], rank)
    for b, L in enumerate(seq_lens.tolist()):
        rows = latent_rows(k_cache, v_cache, block_tables[b], L).to(q.dtype)
        out[b : b + 1] = _attend(q[b : b + 1], rows, scale, rank)
    return out


@_latent_decode.register_fake
def _(q, k_cache, v_cache, seq_lens, block_tables, scale, rank) -> Tensor:
    return q.new_empty(*q.shape[:2], rank)


def check_latent(
    q: object,
    k_cache: object,
    v_cache: object,
    seq_lens: object,
    block_tables: object,
    scale: object,
    rank: object,
) -> None:
    qt = checks.tensor("q", q, 3, checks.FLOAT_DTYPES)
    kc, _ = checks.paged_cache(k_cache, v_cache)
    checks.dim("k_cache", kc, 2, 1, "1 (one latent row per token)")
    checks.dim("q", qt, 2, 2 * kc.shape[3], "the latent row (2 x k_cache.shape[3])")
    checks.integer("rank", rank, 1, qt.shape[2] - 1)
    sl = checks.tensor("seq_lens", seq_lens, 1, checks.INT_DTYPES)
    bt = checks.tensor("block_tables", block_tables, 2, checks.INT_DTYPES)
    checks.dim("block_tables", bt, 0, sl.shape[0], "seq_lens.shape[0]")
    checks.number("scale", scale, positive=True)
    checks.seq_lens_fit(sl, bt, kc.shape[1], low=1)
    if bt.numel() and (int(bt.min()) < 0 or int(bt.max()) >= kc.shape[0]):
        raise ValueError(f"block_tables entries must be in [0, {kc.shape[0]}) (cache blocks)")


def latent_prefill(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    rank: int,
) -> Tensor:
    """Causal latent attention of new tokens q [T, H, W] (their rows already cached) ->
    [T, H, rank]; sequence b owns q rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]``."""
    check_latent(q, k_cache, v_cache, seq_lens, block_tables, scale, rank)
    cu = checks.tensor("cu_seqlens_q", cu_seqlens_q, 1, checks.INT_DTYPES)
    starts = cu.tolist()
    q_lens = [b - a for a, b in itertools.pairwise(starts)]
    if len(q_lens) != seq_lens.shape[0] or starts[0] != 0 or starts[-1] != q.shape[0]:
        raise ValueError(f"cu_seqlens_q must run from 0 to {q.shape[0]} over B + 1 entries")
    args = (cu_seqlens_q, seq_lens, block_tables, float(scale), int(rank))
    return call("torch_latent_prefill", q, k_cache, v_cache, *args)


def latent_decode(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    rank: int,
) -> Tensor:
    """One new token per sequence: q [B, H, W] -> [B, H, rank]."""
    check_latent(q, k_cache, v_cache, seq_lens, block_tables, scale, rank)
    checks.dim("seq_lens", seq_lens, 0, q.shape[0], "the number of sequences")
    args = (seq_lens, block_tables, float(scale), int(rank))
    return call("torch_latent_decode", q, k_cache, v_cache, *args)
