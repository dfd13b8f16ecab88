"""CPU decode attention over the paged KV cache: one new token per sequence.

The kernel behind ``tandem::torch_decode_attention`` (registered in
:mod:`tandem.kernels.ops.attention`). Decode is memory-bound on CPU: each step reads
every sequence's whole K/V. Sequences are sorted by length and gathered a few at a
time, so a bucket pads to a near-equal length and its gathered K/V is still in cache
when SDPA reads it; the gather targets are reused between calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

# Sequences gathered per SDPA call in decode: a few sequences' K/V stay cache-resident
# between the gather and the attention, which beats one big padded gather by ~3x on CPU.
DECODE_BUCKET = 8


@dataclass(slots=True)
class Bucket:
    """A few sequences gathered and attended together."""

    rows: Tensor | None  # [b] int64 rows of the batch; None: the whole batch in order
    blocks: Tensor  # [b * n] cache blocks to gather, n = blocks of the longest sequence
    mask: Tensor  # [b, 1, 1, n * S] bool, True where a slot holds one of the b sequences
    lens: Tensor  # [b, 1, 1, 1] the sequences' lengths
    windowed: dict[int, Tensor] = field(default_factory=dict)  # window -> its mask

    def mask_for(self, window: int) -> Tensor:
        """The mask, narrowed to each sequence's last ``window`` slots where window > 0."""
        if window <= 0:
            return self.mask
        mask = self.windowed.get(window)
        if mask is None:
            slots = torch.arange(self.mask.shape[-1], device=self.mask.device)
            mask = self.windowed[window] = self.mask & (slots > self.lens - 1 - window)
        return mask


@dataclass(slots=True)
class Plan:
    """The buckets of one decode batch; every layer of a step reuses them."""

    seq_lens: Tensor  # the tensor the plan was made for (held, so its id stays unique)
    lens: list[int]
    tables: Tensor  # [B, M] a copy of the block tables the plan was made for
    block_size: int
    buckets: list[Bucket]

    def fits(self, seq_lens: Tensor, lens: list[int], tables: Tensor, block_size: int) -> bool:
        """The same seq_lens tensor (a later layer of the same step) with the same
        values, block size and block-table contents (values compared, so a tensor
        changed in place is never served a stale plan)."""
        return (
            self.seq_lens is seq_lens
            and self.lens == lens
            and self.block_size == block_size
            and self.tables.shape == tables.shape
            and self.tables.device == tables.device
            and bool(torch.equal(self.tables, tables))
        )


def make_plan(seq_lens: Tensor, tables: Tensor, block_size: int) -> Plan:
    """Sort by length, cut into buckets of :data:`DECODE_BUCKET`, precompute gathers."""
    lens = seq_lens.tolist()
    B, dev = len(lens), tables.device
    order = sorted(range(B), key=lens.__getitem__) if B > DECODE_BUCKET else list(range(B))
    buckets = []
    for i in range(0, B, DECODE_BUCKET):
        part = order[i : i + DECODE_BUCKET]
        n = -(-max(lens[r] for r in part) // block_size)
        rows = None if B <= DECODE_BUCKET else torch.tensor(part, dtype=torch.int64, device=dev)
        sub = tables if rows is None else tables.index_select(0, rows)
        flat = sub[:, :n].clone(memory_format=torch.contiguous_format).view(-1)  # [b * n]
        sub_lens = torch.tensor([lens[r] for r in part], device=dev)
        valid = torch.arange(n * block_size, device=dev)[None, :] < sub_lens[:, None]
        buckets.append(Bucket(rows, flat, valid[:, None, None, :], sub_lens[:, None, None, None]))
    return Plan(seq_lens, lens, tables.clone(), block_size, buckets)


# The plan of the latest decode batch: the layers of one step share it.
_LAST: list[Plan] = []


def plan_for(seq_lens: Tensor, block_tables: Tensor, block_size: int) -> Plan:
    if _LAST and _LAST[0].fits(seq_lens, seq_lens.tolist(), block_tables, block_size):
        return _LAST[0]
    plan = make_plan(seq_lens, block_tables, block_size)
    _LAST[:] = [plan]
    return plan


def decode_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    seq_lens: Tensor,
    block_tables: Tensor,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
) -> Tensor:
    """CPU kernel of ``tandem::torch_decode_attention``.

    Sequences are sorted by length and taken in buckets of :data:`DECODE_BUCKET`, so
    each bucket pads to a near-equal length; a bucket is one gather and one SDPA (a
    windowed layer narrows the mask; soft-capped scores take explicit matmuls).
    """
    B = q.shape[0]
    if B == 0:
        return torch.empty_like(q)
    plan = plan_for(seq_lens, block_tables, k_cache.shape[1])
    extra = (window, softcap)
    if len(plan.buckets) == 1:
        return _attend(q, k_cache, v_cache, plan.buckets[0], scale, *extra)
    out = torch.empty_like(q)
    for bucket in plan.buckets:
        part = _attend(q.index_select(0, bucket.rows), k_cache, v_cache, bucket, scale, *extra)
        out.index_copy_(0, bucket.rows, part)
    return out


# Reused gather targets, keyed by (slot, dtype, device): a fresh multi-megabyte
# allocation per bucket and layer costs page faults on every decode step.
_SCRATCH: dict[tuple[int, torch.dtype, torch.device], Tensor] = {}


def _gather_into(cache: Tensor, blocks: Tensor, slot: int) -> Tensor:
    """``cache.index_select(0, blocks)`` into a reused buffer: [n, S, KVH, D].

    The buffer is emptied and refilled in place: index_select grows its storage only
    when a gather is larger than any before. Either branch is one op, so the op count
    of a call does not depend on whether the buffer existed.
    """
    key = (slot, cache.dtype, cache.device)
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = _SCRATCH[key] = cache.new_empty(0)
    else:
        buf.resize_(0)
    return torch.index_select(cache, 0, blocks, out=buf)


def _attend(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    bucket: Bucket,
    scale: float,
    window: int = 0,
    softcap: float = 0.0,
) -> Tensor:
    """One gather through the block tables and one SDPA for a bucket's sequences."""
    B, H, D = q.shape
    KVH = k_cache.shape[2]
    G = H // KVH
    L = bucket.mask.shape[-1]
    # gather whole blocks: [B * n, S, KVH, D] -> [B, KVH, L, D] (a strided view)
    k = _gather_into(k_cache, bucket.blocks, 0).view(B, L, KVH, D).transpose(1, 2).to(q.dtype)
    v = _gather_into(v_cache, bucket.blocks, 1).view(B, L, KVH, D).transpose(1, 2).to(q.dtype)
    qh = q.view(B, KVH, G, D)  # GQA: a KV head's G query heads attend together
    mask = bucket.mask_for(window)
    if softcap > 0:  # SDPA has no soft cap: [B, KVH, G, L] scores, capped, then masked
        scores = torch.matmul(qh, k.transpose(-1, -2)).mul_(scale / softcap).tanh_()
        scores = scores.mul_(softcap).masked_fill_(~mask, float("-inf"))
        out = torch.matmul(scores.float().softmax(-1).to(q.dtype), v)
    else:
        out = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, scale=scale)
    return out.reshape(B, H, D)
