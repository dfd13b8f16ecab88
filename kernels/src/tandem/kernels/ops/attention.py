"""Causal attention over the paged KV cache: varlen prefill and batched decode.

See :mod:`tandem.kernels.reference` for the layout; these CPU kernels are plain torch
(the decode kernel itself is in :mod:`tandem.kernels.ops.paged_decode`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels.ops.attention_checks import check_decode, check_prefill
from tandem.kernels.ops.library import call, define
from tandem.kernels.ops.paged_decode import decode_impl


def gather(cache: Tensor, table: Tensor, length: int, first: int = 0) -> Tensor:
    """Entries ``first .. length - 1`` of a sequence. cache: [N, S, KVH, D]; table: [M]."""
    S = cache.shape[1]
    lo, hi = first // S, -(-length // S)
    rows = cache.index_select(0, table[lo:hi].long())  # [blocks, S, KVH, D]
    return rows.flatten(0, 1)[first - lo * S : length - lo * S]  # [length - first, KVH, D]


# score elements one query chunk may hold (x4 bytes in fp32): bounds memory on long prompts
SCORE_LIMIT = 1 << 24


def _causal(
    q: Tensor, k: Tensor, v: Tensor, scale: float, window: int = 0, softcap: float = 0.0
) -> Tensor:
    """q: [Q, H, D] are the last Q positions of keys k, v: [L, KVH, D]; returns [Q, H, D].

    Explicit batched matmuls with an additive causal bias: on CPU this beats SDPA with a
    mask (its math path, and much worse with 2 threads) and SDPA's GQA mode alike.
    """
    Q, H, D = q.shape
    L, KVH, _ = k.shape
    G = H // KVH
    kt = k.permute(1, 2, 0)  # [KVH, D, L]
    vh = v.transpose(0, 1)  # [KVH, L, D]
    out = torch.empty_like(q)
    step = max(1, SCORE_LIMIT // (KVH * G * L))
    for lo in range(0, Q, step):
        hi = min(Q, lo + step)
        n = hi - lo
        # queries of one KV head side by side: [KVH, G*n, D]
        qh = q[lo:hi].reshape(n, KVH, G, D).permute(1, 2, 0, 3).reshape(KVH, G * n, D)
        bias = _bias(L - Q + lo, n, L, window, q.dtype, q.device).repeat(G, 1)  # [G*n, L]
        if softcap > 0:  # the cap goes on the scaled scores, before the mask
            scores = torch.bmm(qh, kt).mul_(scale / softcap).tanh_().mul_(softcap).add_(bias)
        else:
            scores = torch.baddbmm(bias, qh, kt, alpha=scale)  # [KVH, G*n, L]
        probs = scores.float().softmax(-1).to(q.dtype)
        o = torch.bmm(probs, vh)  # [KVH, G*n, D]
        out[lo:hi] = o.view(KVH, G, n, D).permute(2, 0, 1, 3).reshape(n, H, D)
    return out


def _bias(
    first: int, n: int, L: int, window: int, dtype: torch.dtype, device: torch.device
) -> Tensor:
    # query i sits at position first + i and sees keys 0..first + i (the last `window` of
    # them where window > 0): [n, L], 0 or -inf
    q_pos = torch.arange(first, first + n, device=device)[:, None]
    k_pos = torch.arange(L, device=device)[None, :]
    hidden = k_pos > q_pos
    if window > 0:
        hidden |= k_pos <= q_pos - window
    return torch.zeros(n, L, dtype=dtype, device=device).masked_fill_(hidden, float("-inf"))


def prefill_impl(
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
    """CPU kernel of ``tandem::torch_prefill_attention`` (batched matmuls per sequence).

    With a window, a sequence's keys before its first query's window are left out of
    the gather: they are never read.
    """
    out = torch.empty_like(q)
    cu = cu_seqlens_q.tolist()
    lens = seq_lens.tolist()
    for b, L in enumerate(lens):
        lo, hi = cu[b], cu[b + 1]
        if hi - lo == L:  # no context: the new tokens are all the keys
            kk, vv = k[lo:hi], v[lo:hi]
        else:
            first = max(0, L - (hi - lo) - window + 1) if window > 0 else 0
            kk = gather(k_cache, block_tables[b], L, first).to(q.dtype)
            vv = gather(v_cache, block_tables[b], L, first).to(q.dtype)
        out[lo:hi] = _causal(q[lo:hi], kk, vv, scale, window, softcap)
    return out


_prefill_attention = define("torch_prefill_attention")(prefill_impl)


@_prefill_attention.register_fake
def _(
    q, k, v, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, window=0, softcap=0.0
):
    return torch.empty_like(q)


_decode_attention = define("torch_decode_attention")(decode_impl)


@_decode_attention.register_fake
def _(q, k_cache, v_cache, seq_lens, block_tables, scale, *extra) -> Tensor:
    return torch.empty_like(q)


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
    """Varlen causal attention; q: [T, H, D], k, v: [T, KVH, D] already in the cache.

    Sequence b owns tokens ``cu_seqlens_q[b]:cu_seqlens_q[b+1]``, the last ones of its
    ``seq_lens[b]`` tokens (earlier ones are read from the cache: chunked prefill).
    ``window`` > 0: a query sees its last ``window`` keys only; ``softcap`` > 0: scores
    soft-capped (see :func:`tandem.kernels.reference.causal_attention`).
    """
    check_prefill(
        q, k, v, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, scale, window, softcap
    )
    return call(
        "torch_prefill_attention",
        q,
        k,
        v,
        k_cache,
        v_cache,
        cu_seqlens_q,
        seq_lens,
        block_tables,
        float(scale),
        int(window),
        float(softcap),
    )


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
    check_decode(q, k_cache, v_cache, seq_lens, block_tables, scale, window, softcap)
    args = (q, k_cache, v_cache, seq_lens, block_tables, float(scale), int(window), float(softcap))
    return call("torch_decode_attention", *args)
