"""Plain, obviously-correct reference implementations of every Tandem op.

These are the specification: the custom ops in :mod:`tandem.kernels.ops` must agree
with them (property tests check it), and they are deliberately slow and simple.

Layout conventions shared by every op:

* a flattened batch of ``T`` tokens; ``H`` query heads, ``KVH`` key/value heads
  (``H % KVH == 0``: MHA, GQA and MQA), head size ``D``;
* a paged KV cache per layer: ``k_cache``/``v_cache`` of shape ``[N, S, KVH, D]`` with
  ``N`` blocks of ``S`` slots; token ``j`` of a sequence lives in block
  ``block_table[j // S]`` at offset ``j % S``; a slot index is ``block * S + offset``;
* a sequence's ``seq_len`` counts every token whose K/V is in the cache, including the
  ones being computed in this step; its new (query) tokens are the last ``q_len`` of them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    # x: [T, C], weight: [C]
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * weight


def fused_add_rms_norm(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float
) -> tuple[Tensor, Tensor]:
    # returns (rms_norm(x + residual), x + residual)
    summed = x + residual
    return rms_norm(summed, weight, eps), summed


def rotary_embedding(
    positions: Tensor, q: Tensor, k: Tensor, cos_sin_cache: Tensor
) -> tuple[Tensor, Tensor]:
    """Neox-style (rotate-half) rotary embedding over the full head size.

    positions: [T]; q: [T, H, D]; k: [T, KVH, D];
    cos_sin_cache: [max_pos, D] holding cos in [:, :D/2] and sin in [:, D/2:].
    """
    half = q.shape[-1] // 2
    cs = cos_sin_cache[positions]  # [T, D]
    cos = cs[:, None, :half].to(q.dtype)
    sin = cs[:, None, half:].to(q.dtype)

    def rotate(x: Tensor) -> Tensor:
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return rotate(q), rotate(k)


def silu_and_mul(x: Tensor) -> Tensor:
    # x: [T, 2I] -> [T, I]
    gate, up = x.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def gelu_tanh_and_mul(x: Tensor) -> Tensor:
    # x: [T, 2I] -> [T, I]; GELU with the tanh approximation on the gate, in fp32
    gate, up = x.float().chunk(2, dim=-1)
    inner = math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate.pow(3))
    return (0.5 * gate * (1.0 + torch.tanh(inner)) * up).to(x.dtype)


def write_kv_cache(
    k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, slot_mapping: Tensor
) -> None:
    """Store k, v ([T, KVH, D]) at their slots; a slot of -1 is skipped (padding)."""
    S = k_cache.shape[1]
    for t in range(k.shape[0]):
        slot = int(slot_mapping[t])
        if slot < 0:
            continue
        k_cache[slot // S, slot % S] = k[t]
        v_cache[slot // S, slot % S] = v[t]


def gather_kv(cache: Tensor, block_table: Tensor, seq_len: int) -> Tensor:
    # cache: [N, S, KVH, D] -> the sequence's first seq_len entries: [seq_len, KVH, D]
    S = cache.shape[1]
    rows = [cache[int(block_table[j // S]), j % S] for j in range(seq_len)]
    return torch.stack(rows) if rows else cache.new_zeros((0, *cache.shape[2:]))


def causal_attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, window: int = 0, softcap: float = 0.0
) -> Tensor:
    """q: [Q, H, D] are the last Q positions of a sequence whose keys are k, v: [L, KVH, D].

    ``window`` > 0: query i sees keys j with i - window < j <= i only (sliding window).
    ``softcap`` > 0: each scaled score s becomes softcap * tanh(s / softcap) first.
    """
    Q, H, _ = q.shape
    L, KVH, _ = k.shape
    rep = H // KVH
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    q_pos = torch.arange(L - Q, L)[:, None]
    k_pos = torch.arange(L)[None, :]
    hidden = k_pos > q_pos
    if window > 0:
        hidden = hidden | (k_pos <= q_pos - window)
    scores = scores.masked_fill(hidden, float("-inf"))
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.float())
    return out.to(q.dtype)


def prefill_attention(
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
    """Varlen causal attention for sequences with q_len >= 1 new tokens.

    q: [T, H, D]; k, v: [T, KVH, D] (the new tokens, already written to the cache);
    cu_seqlens_q: [B+1] int32; seq_lens: [B] int32 (context + new); block_tables: [B, M].
    Query i of sequence b sits at position seq_lens[b] - q_len_b + i and sees keys 0..it
    (the last ``window`` of them where window > 0). Returns [T, H, D].
    """
    out = torch.empty_like(q)
    for b in range(seq_lens.shape[0]):
        lo, hi = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        L = int(seq_lens[b])
        kk = gather_kv(k_cache, block_tables[b], L)
        vv = gather_kv(v_cache, block_tables[b], L)
        out[lo:hi] = causal_attention(q[lo:hi], kk, vv, scale, window, softcap)
    return out


def decode_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
) -> Tensor:
    """One new token per sequence. q: [B, H, D]; seq_lens: [B]; returns [B, H, D]."""
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        L = int(seq_lens[b])
        kk = gather_kv(k_cache, block_tables[b], L)
        vv = gather_kv(v_cache, block_tables[b], L)
        out[b : b + 1] = causal_attention(q[b : b + 1], kk, vv, scale, window, softcap)
    return out


def latent_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cu_seqlens_q: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    rank: int,
) -> Tensor:
    """Latent attention (MLA): each token's cached row is its K half then its V half, W
    values; queries q [T, H, W] attend causally to the rows (one KV head), and the output
    is the weighted sum of the rows' first ``rank`` values: [T, H, rank]."""
    out = q.new_empty(*q.shape[:2], rank)
    for b in range(seq_lens.shape[0]):
        lo, hi = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        L = int(seq_lens[b])
        k = gather_kv(k_cache, block_tables[b], L)
        v = gather_kv(v_cache, block_tables[b], L)
        rows = torch.cat((k, v), dim=-1)  # [L, 1, W]
        out[lo:hi] = causal_attention(q[lo:hi], rows, rows, scale)[..., :rank]
    return out


# --- mixture of experts ------------------------------------------------------------


def topk_route(logits: Tensor, top_k: int, normalize: bool) -> tuple[Tensor, Tensor]:
    """Per token: softmax over the experts, the top_k largest (lowest index first among
    equals), renormalised if ``normalize``. logits [T, E] -> (weights [T, K], ids [T, K])."""
    weights, ids = [], []
    for row in logits.float():
        probs = row.softmax(-1).tolist()
        chosen = sorted(range(len(probs)), key=lambda e: (-probs[e], e))[:top_k]
        w = torch.tensor([probs[e] for e in chosen])
        weights.append(w / w.sum() if normalize else w)
        ids.append(torch.tensor(chosen))
    return torch.stack(weights), torch.stack(ids)


def grouped_route(
    logits: Tensor,
    top_k: int,
    n_group: int,
    topk_group: int,
    bias: Tensor | None,
    normalize: bool,
    scaling: float,
) -> tuple[Tensor, Tensor]:
    """Per token: sigmoid scores; groups ranked by the sum of their two best (score + bias);
    the best top_k experts (by score + bias, lowest index first among equals) of the
    topk_group best groups; weights = their scores (renormalised if asked) x scaling."""
    weights, ids = [], []
    E = logits.shape[1]
    size = E // n_group
    for row in logits.float():
        score = row.sigmoid().tolist()
        choice = [s + (0.0 if bias is None else float(bias[e])) for e, s in enumerate(score)]
        worth = [sum(sorted(choice[g * size : (g + 1) * size])[-2:]) for g in range(n_group)]
        groups = sorted(range(n_group), key=lambda g: (-worth[g], g))[:topk_group]
        pool = [e for g in groups for e in range(g * size, (g + 1) * size)]
        chosen = sorted(pool, key=lambda e: (-choice[e], e))[:top_k]
        w = torch.tensor([score[e] for e in chosen], dtype=torch.float64)
        if normalize:
            w = w / (w.sum() + 1e-20)
        weights.append((w * scaling).float())
        ids.append(torch.tensor(chosen))
    return torch.stack(weights), torch.stack(ids)


def fused_moe(
    x: Tensor, w13: Tensor, w2: Tensor, topk_ids: Tensor, topk_weights: Tensor, activation: str
) -> Tensor:
    """Per token and chosen expert: weight * down(act(gate . x) * (up . x)), summed.

    x [T, C]; w13 [E, 2I, C] (gate rows, then up); w2 [E, C, I]; topk [T, K]."""
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        xt = x[t].double()
        for e, w in zip(topk_ids[t].tolist(), topk_weights[t].double()):
            h = (w13[e].double() @ xt)[None]  # [1, 2I]: gate, then up
            act = gelu_tanh_and_mul(h) if activation == "gelu_tanh" else silu_and_mul(h)
            out[t] += w * (w2[e].double() @ act[0])
    return out.to(x.dtype)


# --- seeded sampling -----------------------------------------------------------------

_U64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment
_COUNTER_SALT = 0xD1B54A32D192ED03


def splitmix64_mix(x: int) -> int:
    """splitmix64's output function on an unsigned 64-bit integer."""
    x &= _U64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


def seeded_uniform_value(seed: int, counter: int, column: int) -> float:
    """The uniform in (0, 1) of token ``column`` for draw ``counter`` of stream ``seed``.

    The row's key mixes the seed with the mixed, salted counter; the column picks the
    ``column+1``-th splitmix64 output of that key; its top 52 bits ``m`` give
    ``(m + 0.5) / 2**52``. Seeds and counters are taken modulo 2**64.
    """
    key = splitmix64_mix((seed & _U64) ^ splitmix64_mix(counter * _COUNTER_SALT + _GAMMA))
    bits = splitmix64_mix(key + (column + 1) * _GAMMA)
    return ((bits >> 12) + 0.5) / 2**52


def sample_seeded(probs: Tensor, seeds: Tensor, counters: Tensor) -> Tensor:
    """Exponential race: row b draws argmax_j probs[b, j] / -log(u(seed, counter, j)).

    probs: [B, V] float32; seeds, counters: [B] int64; returns [B] int64.
    """
    out = []
    for b in range(probs.shape[0]):
        seed, counter = int(seeds[b]), int(counters[b])
        best, best_score = 0, -1.0
        for j in range(probs.shape[1]):
            u = seeded_uniform_value(seed, counter, j)
            score = float(probs[b, j]) / -math.log(u)
            if score > best_score:
                best, best_score = j, score
        out.append(best)
    return torch.tensor(out, dtype=torch.int64)
