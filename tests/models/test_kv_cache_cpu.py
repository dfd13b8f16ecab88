"""The CPU KV cache: zeroed memory faulted in up front, one contiguous tensor per K/V."""

from __future__ import annotations

import gc
import itertools
import mmap

import psutil
import pytest
import torch

from tandem.core.kv.cache import allocate_kv_caches
from tandem.kernels.memory import MADV_POPULATE_WRITE


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_caches_are_zero_contiguous_and_independent(dtype):
    caches = allocate_kv_caches(3, 2, 4, num_blocks=6, block_size=4, dtype=dtype, device="cpu")
    flat = [t for kv in caches for t in kv]
    for t in flat:
        assert t.is_contiguous() and t.dtype == dtype and t.shape == (6, 4, 2, 4)
        assert not t.any()
    flat[2].fill_(1.0)  # layer 1's keys
    flat[2][5, 3] = 7.0
    assert all(not t.any() for i, t in enumerate(flat) if i != 2)
    assert flat[2].eq(1.0).sum() == flat[2].numel() - 2 * 4
    ptrs = sorted(t.data_ptr() for t in flat)
    step = flat[0].nbytes
    assert all(b - a >= step for a, b in itertools.pairwise(ptrs))


def test_each_layer_may_have_its_own_pool():
    # a local layer's pool (5 blocks and the null block) beside a global layer's 3
    caches = allocate_kv_caches(3, 2, 4, [6, 3, 6], block_size=4, dtype=torch.float32, device="cpu")
    assert [k.shape[0] for k, _ in caches] == [6, 3, 6]
    flat = [t for kv in caches for t in kv]
    for t in flat:
        t.fill_(1.0)  # every tensor its own memory: no overlap between them
    assert sum(int(t.sum()) for t in flat) == sum(t.numel() for t in flat)
    ptrs = sorted((t.data_ptr(), t.nbytes) for t in flat)
    assert all(a + n <= b for (a, n), (b, _) in itertools.pairwise(ptrs))
    with pytest.raises(ValueError, match=r"one count per layer \(3\), got 2"):
        allocate_kv_caches(3, 2, 4, [6, 3], block_size=4, dtype=torch.float32, device="cpu")


def test_memory_outlives_the_allocator_frame():
    k, v = allocate_kv_caches(
        1, 1, 2, num_blocks=2, block_size=2, dtype=torch.float32, device="cpu"
    )[0]
    gc.collect()
    k.add_(3.0)
    v.copy_(k)
    assert torch.equal(v, torch.full_like(v, 3.0))


def _can_populate() -> bool:
    probe = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        probe.madvise(MADV_POPULATE_WRITE)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def test_large_cache_is_resident_and_zero():
    """A 256 MiB cache is faulted in at allocation (no page faults inside the first
    batch's K/V writes), and every block reads as zero."""
    if not _can_populate():
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
    proc = psutil.Process()
    before = proc.memory_info().rss
    caches = allocate_kv_caches(
        4, 8, 64, num_blocks=2048, block_size=16, dtype=torch.float32, device="cpu"
    )
    grown = proc.memory_info().rss - before
    assert grown >= 200 * 2**20, f"only {grown / 2**20:.0f} MiB resident after allocation"
    k, v = caches[-1]
    assert k.shape == (2048, 16, 8, 64)
    assert not k[2047].any() and not v[0].any()


def test_a_cache_past_the_populate_size_faults_in_as_it_is_written(monkeypatch):
    """A cache sized from the machine's memory is not made resident at start-up: only the
    blocks written take memory, and the others still read as zero."""
    import tandem.core.kv.cache as kv_cache

    monkeypatch.setattr(kv_cache, "POPULATE_BYTES", 64 * 2**20)
    proc = psutil.Process()
    before = proc.memory_info().rss
    caches = allocate_kv_caches(
        4, 8, 64, num_blocks=2048, block_size=16, dtype=torch.float32, device="cpu"
    )  # 256 MiB
    assert proc.memory_info().rss - before < 64 * 2**20
    k, v = caches[0]
    k[:16].fill_(1.0)  # 16 blocks of one layer: 512 KiB
    assert proc.memory_info().rss - before < 64 * 2**20
    assert not k[16:].any() and not v.any()
