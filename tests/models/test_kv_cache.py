"""KV cache sizing and allocation."""

from __future__ import annotations

import pytest
import torch

from tandem.core.kv.cache import allocate_kv_caches, kv_cache_bytes_per_block


def test_bytes_per_block_matches_allocation():
    caches = allocate_kv_caches(
        3, 2, 8, num_blocks=5, block_size=4, dtype=torch.float16, device="cpu"
    )
    assert len(caches) == 3
    for k, v in caches:
        assert k.shape == v.shape == (5, 4, 2, 8)
        assert k.dtype == torch.float16 and not k.any()
        assert k.data_ptr() != v.data_ptr()
    total = sum(k.nbytes + v.nbytes for k, v in caches)
    assert kv_cache_bytes_per_block(3, 2, 8, 4, torch.float16) * 5 == total


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0, 2, 8, 4, torch.float32), ValueError, "num_layers must be a positive integer, got 0"),
        ((1, 2, 8, -4, torch.float32), ValueError, "block_size must be a positive"),
        ((1, 2.0, 8, 4, torch.float32), TypeError, "num_kv_heads must be an int"),
        ((1, 2, 8, 4, "fp16"), TypeError, "dtype must be a torch.dtype"),
    ],
)
def test_bad_sizes(args, error, match):
    with pytest.raises(error, match=match):
        kv_cache_bytes_per_block(*args)
