"""Builders of random paged-KV attention cases for the kernel tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

from tandem.kernels import reference


@dataclass(slots=True)
class PagedCase:
    q: Tensor  # [T, H, D]
    k: Tensor  # [T, KVH, D], new tokens, already written to the cache
    v: Tensor
    k_cache: Tensor  # [N, S, KVH, D]
    v_cache: Tensor
    cu_seqlens_q: Tensor  # [B+1] int32
    seq_lens: Tensor  # [B] int32
    block_tables: Tensor  # [B, M] int32, random non-contiguous block ids
    slot_mapping: Tensor  # [T] int64
    scale: float

    def prefill_args(self) -> tuple:
        """The arguments of a prefill attention call, in the kernels' order."""
        return (
            self.q,
            self.k,
            self.v,
            self.k_cache,
            self.v_cache,
            self.cu_seqlens_q,
            self.seq_lens,
            self.block_tables,
            self.scale,
        )

    def decode_args(self) -> tuple:
        """The arguments of a decode attention call, in the kernels' order."""
        return (self.q, self.k_cache, self.v_cache, self.seq_lens, self.block_tables, self.scale)


def build_case(
    seed: int,
    q_lens: list[int],
    ctx_lens: list[int],
    heads: int,
    kv_heads: int,
    head_size: int,
    block_size: int,
    dtype: torch.dtype = torch.float32,
    strided_tables: bool = True,
) -> PagedCase:
    """Sequences with ``ctx_lens`` cached tokens and ``q_lens`` new ones, in shuffled blocks."""
    g = torch.Generator().manual_seed(seed)
    seq_lens = [c + n for c, n in zip(ctx_lens, q_lens)]
    need = [-(-s // block_size) for s in seq_lens]
    width = max(need) + 1
    num_blocks = sum(need) + 3
    perm = torch.randperm(num_blocks, generator=g).tolist()
    tables, used = [], 0
    for n in need:
        row = perm[used : used + n]
        used += n
        pad = torch.randint(0, num_blocks, (width - n,), generator=g).tolist()
        tables.append(row + pad)  # padding points at arbitrary (valid) blocks
    table = torch.tensor(tables, dtype=torch.int32)
    if strided_tables:  # same values, non-contiguous memory
        wide = torch.zeros((table.shape[0], width * 2), dtype=torch.int32)
        wide[:, ::2] = table
        table = wide[:, ::2]
    shape = (num_blocks, block_size, kv_heads, head_size)
    k_cache = torch.randn(shape, generator=g).to(dtype)
    v_cache = torch.randn(shape, generator=g).to(dtype)
    T = sum(q_lens)
    q = torch.randn((T, heads, head_size), generator=g).to(dtype)
    k = torch.randn((T, kv_heads, head_size), generator=g).to(dtype)
    v = torch.randn((T, kv_heads, head_size), generator=g).to(dtype)
    slots = []
    for b, (c, s) in enumerate(zip(ctx_lens, seq_lens)):
        slots += [tables[b][p // block_size] * block_size + p % block_size for p in range(c, s)]
    slot_mapping = torch.tensor(slots, dtype=torch.int64)
    reference.write_kv_cache(k, v, k_cache, v_cache, slot_mapping)
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    return PagedCase(
        q,
        k,
        v,
        k_cache,
        v_cache,
        cu,
        torch.tensor(seq_lens, dtype=torch.int32),
        table,
        slot_mapping,
        head_size**-0.5,
    )


@pytest.fixture(scope="session")
def paged_case() -> Callable[..., PagedCase]:
    return build_case
