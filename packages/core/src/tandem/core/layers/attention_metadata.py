"""What one forward step needs to know about its batch, shared by both engines.

A step is a flattened batch of ``T`` tokens laid out **prefills first, then decodes**:

* the first ``num_prefill_tokens`` tokens belong to ``num_prefills`` sequences that
  each bring ``q_len >= 1`` new tokens (a whole prompt, a chunk of one, or a recompute);
  they may already have context in the cache (chunked prefill, prefix-cache hits);
* the remaining ``num_decodes`` tokens are one new token per decoding sequence.

Every token's K/V is written to ``slot_mapping`` before attention reads the cache.
Where the local (sliding-window) layers keep a pool of blocks of their own, ``local``
holds the same step through their block tables: its own slots and tables, the same
lengths (:mod:`tandem.core.kv.window`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: Tensor  # [T] int64, block * block_size + offset
    num_prefills: int
    num_prefill_tokens: int
    num_decodes: int
    prefill_cu_seqlens_q: Tensor  # [P+1] int32
    prefill_seq_lens: Tensor  # [P] int32, context + new tokens
    prefill_block_tables: Tensor  # [P, M] int32
    decode_seq_lens: Tensor  # [Dc] int32, context + the new token
    decode_block_tables: Tensor  # [Dc, M] int32
    local: AttentionMetadata | None = None  # the local layers' (None: one pool for all)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decodes


def build_metadata(
    query_lens: list[int],
    seq_lens: list[int],
    block_tables: list[list[int]],
    block_size: int,
    device: torch.device | str = "cpu",
) -> AttentionMetadata:
    """Build metadata from per-sequence lists (sequences already ordered prefills first).

    A sequence is a decode when its ``query_len`` is 1 and it has context before it;
    everything else is a prefill. ``seq_lens[i]`` counts context plus new tokens.
    """
    n = len(query_lens)
    if not (len(seq_lens) == len(block_tables) == n):
        raise ValueError("query_lens, seq_lens and block_tables must have the same length")
    is_decode = [q == 1 and s > 1 for q, s in zip(query_lens, seq_lens)]
    num_prefills = 0
    while num_prefills < n and not is_decode[num_prefills]:
        num_prefills += 1
    if not all(is_decode[num_prefills:]):
        raise ValueError("sequences must be ordered prefills first, then decodes")

    slots: list[int] = []
    for q, s, table in zip(query_lens, seq_lens, block_tables):
        for pos in range(s - q, s):
            slots.append(table[pos // block_size] * block_size + pos % block_size)

    width = max((len(t) for t in block_tables), default=0)
    padded = [t + [0] * (width - len(t)) for t in block_tables]
    tables = torch.tensor(padded, dtype=torch.int32).reshape(n, width)
    cu = [0]
    for q in query_lens[:num_prefills]:
        cu.append(cu[-1] + q)
    i32 = dict(dtype=torch.int32, device=device)
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        num_prefills=num_prefills,
        num_prefill_tokens=cu[-1],
        num_decodes=n - num_prefills,
        prefill_cu_seqlens_q=torch.tensor(cu, **i32),
        prefill_seq_lens=torch.tensor(seq_lens[:num_prefills], **i32),
        prefill_block_tables=tables[:num_prefills].to(device),
        decode_seq_lens=torch.tensor(seq_lens[num_prefills:], **i32),
        decode_block_tables=tables[num_prefills:].to(device),
    )
