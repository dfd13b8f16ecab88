"""The KV cache's default size (a share of the memory left after the weights, capped at
``max_num_seqs`` full sequences) and the longest context that fits it, with the
machine's memory faked."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tandem.core.config.cache import CacheConfig
from tandem.core.config.engine_args import EngineArgs
from tandem.core.kv.budget import (
    DEFAULT_KV_CACHE_CAP_BYTES,
    DEFAULT_KV_CACHE_MEMORY_FRACTION,
    kv_budget_bytes,
    longest_context,
    split_pools,
)
from tandem.core.kv.memory import available_memory, cgroup_headroom, host_available
from tandem.core.kv.window import local_layers

GIB = 1 << 30


def _cache(**kw: object) -> CacheConfig:
    base = dict(
        block_size=16,
        num_kv_blocks=None,
        kv_cache_memory_bytes=None,
        max_num_seqs=4,
        max_model_len=4096,
        enable_prefix_caching=True,
        max_model_len_given=False,
    )
    base.update(kw)
    return CacheConfig(**base)  # type: ignore[arg-type]


def test_the_budget_is_a_share_of_what_is_available() -> None:
    assert DEFAULT_KV_CACHE_MEMORY_FRACTION == 0.5
    assert kv_budget_bytes(10 * GIB, 0.5) == 5 * GIB
    assert kv_budget_bytes(10 * GIB, 0.5, sharers=4) == 5 * GIB // 4  # ranks of one machine
    assert kv_budget_bytes(0, 1.0) == 0
    with pytest.raises(ValueError, match=r"kv_cache_memory_fraction must be in \(0, 1\]"):
        kv_budget_bytes(GIB, 0.0)
    with pytest.raises(ValueError, match=r"available must be an int >= 0"):
        kv_budget_bytes(-1, 0.5)
    with pytest.raises(ValueError, match=r"sharers must be an int >= 1"):
        kv_budget_bytes(GIB, 0.5, sharers=0)


def test_longest_context_in_whole_blocks() -> None:
    def whole(n: int) -> int:
        return math.ceil(n / 16)

    assert longest_context(5, 4096, 16, whole) == 80
    assert longest_context(1000, 100, 16, whole) == 96  # never past the model's own
    assert longest_context(0, 4096, 16, whole) == 0
    assert longest_context(5, 4096, 16, lambda n: 99) == 0  # nothing fits


def test_a_small_model_keeps_a_small_cache() -> None:
    # 16 GiB left, half of it 8 GiB: 4 sequences of 256 blocks of 1000 bytes need ~1 MB
    c = _cache()
    assert c.resolve_num_blocks(1000, available=16 * GIB) == 4 * 256
    assert c.max_model_len == 4096


def test_a_context_that_does_not_fit_shrinks_to_what_does() -> None:
    # 300000 bytes left, half of it 150 blocks of 1000 bytes: 150 * 16 = 2400 tokens
    c = _cache(step_tokens=2048)
    assert c.resolve_num_blocks(1000, available=300_000) == 150
    assert c.max_model_len == 2400 and c.blocks_per_seq == 150
    assert c.step_tokens == 2048
    c = _cache(step_tokens=2048)
    c.resolve_num_blocks(1000, available=100_000)
    assert (c.max_model_len, c.step_tokens) == (800, 800)


def test_a_context_given_that_does_not_fit_is_an_error() -> None:
    c = _cache(max_model_len_given=True)
    with pytest.raises(ValueError) as info:
        c.resolve_num_blocks(1000, available=300_000)
    text = str(info.value)
    assert "holds 150 blocks of 16 tokens" in text
    assert "kv_cache_memory_fraction=0.5 of 300000 bytes available after the weights" in text
    assert "1000 bytes per block" in text and "max_model_len=4096 needs 256" in text
    assert "--max-model-len" in text and "--kv-cache-memory-fraction" in text
    assert c.max_model_len == 4096 and c.num_kv_blocks is None


def test_not_one_block_of_context_fits() -> None:
    with pytest.raises(ValueError, match=r"holds 0 blocks .* max_model_len=4096 needs 256"):
        _cache().resolve_num_blocks(1000, available=1000)


def test_a_count_or_byte_budget_shrinks_the_context_too() -> None:
    c = _cache(num_kv_blocks=10)
    assert c.resolve_num_blocks(1000) == 10 and c.max_model_len == 160
    c = _cache(kv_cache_memory_bytes=20_500)
    assert c.resolve_num_blocks(1000) == 20 and c.max_model_len == 320
    assert c.kv_source == "kv_cache_memory_bytes=20500"


def test_a_sliding_window_keeps_the_whole_context_in_a_few_blocks() -> None:
    # every layer slides over 8 keys; steps of 4 tokens: a sequence holds 4 blocks of 4
    # at most, whatever its length
    c = _cache(block_size=4, sliding_window=8, step_tokens=4, max_model_len=64)
    assert c.resolve_num_blocks(100, available=1000) == 5 and c.max_model_len == 64
    # whole-prompt steps: a prompt of n tokens needs its n tokens' blocks at once
    c = _cache(block_size=4, sliding_window=8, max_model_len=64)
    assert c.resolve_num_blocks(100, available=1000) == 5
    assert c.max_model_len == 20 and c.blocks_per_seq == 5


def test_processes_sharing_the_memory_split_it(tiny_model: Path) -> None:
    one = EngineArgs(model=str(tiny_model), dtype="float32", max_num_seqs=10**6).create_config()
    two = EngineArgs(
        model=str(tiny_model), dtype="float32", max_num_seqs=10**6, data_parallel_size=2
    ).create_config()
    assert (one.kv_sharers, two.kv_sharers) == (1, 2)
    per_block = one.kv_bytes_per_block
    assert one.resolve_kv_cache(1000 * per_block) == 500
    assert two.resolve_kv_cache(1000 * per_block) == 250


def test_the_fraction_given_is_used(tiny_model: Path) -> None:
    cfg = EngineArgs(
        model=str(tiny_model), max_num_seqs=10**6, kv_cache_memory_fraction=0.25
    ).create_config()
    assert cfg.cache.kv_cache_memory_fraction == 0.25
    assert cfg.resolve_kv_cache(1000 * cfg.kv_bytes_per_block) == 250


def test_the_default_share_is_capped_unless_the_fraction_is_given(tiny_model: Path) -> None:
    # 64 GiB left: half is 32 GiB, but by default the cache takes at most 4 GiB
    block = 1 << 20
    c = _cache(max_num_seqs=10**6, kv_cache_memory_cap=DEFAULT_KV_CACHE_CAP_BYTES)
    assert c.resolve_num_blocks(block, available=64 * GIB) == DEFAULT_KV_CACHE_CAP_BYTES // block
    assert "at most 4294967296 bytes by default" in c.kv_source
    assert _cache(max_num_seqs=10**6).resolve_num_blocks(block, available=64 * GIB) == 32 * 1024
    default = EngineArgs(model=str(tiny_model)).create_config()
    given = EngineArgs(model=str(tiny_model), kv_cache_memory_fraction=0.5).create_config()
    assert default.cache.kv_cache_memory_cap == DEFAULT_KV_CACHE_CAP_BYTES
    assert given.cache.kv_cache_memory_cap is None


def test_a_shortened_context_reaches_every_config(tiny_model: Path) -> None:
    with pytest.raises(ValueError, match=r"holds 0 blocks"):  # refused before any engine
        EngineArgs(model=str(tiny_model), kv_cache_memory_bytes=1).create_config()
    cfg = EngineArgs(model=str(tiny_model), num_kv_blocks=3).create_config()
    assert cfg.model.max_model_len == 512  # the model's, until the cache is sized
    assert cfg.resolve_kv_cache() == 3
    assert cfg.model.max_model_len == cfg.scheduler.max_model_len == cfg.cache.max_model_len == 48


# ----- local and global layers (Gemma 2 and 3) ----------------------------------------


def _mixed(**kw: object) -> CacheConfig:
    # 6 layers, 5 of them local over a window of 64; blocks of 16, steps of 64 tokens: a
    # local layer holds peak_blocks(64, 64, 16) = 9 blocks of a sequence at most
    base: dict[str, object] = dict(
        local_layers=(0, 1, 2, 3, 4), local_window=64, num_layers=6, step_tokens=64
    )
    base.update(kw)
    return _cache(**base)


def test_which_layers_are_local() -> None:
    assert local_layers((8, None, 8, None)) == ((0, 2), 8)
    assert local_layers((4, 8, None)) == ((0, 1), 8)
    assert local_layers((8, 8)) == ((), None)  # every layer slides: one pool (kv_window)
    assert local_layers((None, None)) == ((), None)


def test_the_pools_share_bytes_as_one_sequence_needs_them() -> None:
    # one sequence of 4096 tokens: 256 blocks in the global layer, 9 in each local one
    assert split_pools(256 + 5 * 9, 256, 9, 1, 5) == (256, 9)
    assert split_pools(10 * (256 + 45), 256, 9, 1, 5) == (2560, 90)


def test_a_long_context_costs_what_its_global_layers_need() -> None:
    c = _mixed()
    per_block = 6 * 1000  # 1000 bytes a block in each of the 6 layers
    assert c.layer_blocks_for(4096) == 256 + 5 * 9  # 301, not 6 * 256 = 1536
    # 4 sequences at most: 4 x 301 blocks of one layer, whatever the memory
    assert c.resolve_num_blocks(per_block, available=10**12) == 4 * 256
    assert c.num_local_blocks == 4 * 9
    assert c.layer_blocks() == [37] * 5 + [1024]  # the local pool with its null block
    assert c.kv_bytes(per_block) == 4 * 301 * 1000
    assert c.bytes_per_token(per_block) == 1000 // 16  # the global layer's share
    assert (
        c.describe_blocks()
        == "1024 blocks of 16 tokens for the global layers and 36 for the local ones"
    )


def test_a_mixed_context_that_does_not_fit_shrinks_by_its_global_layers() -> None:
    c = _mixed()
    # 2 x 200 x 1000 bytes: half is 200 blocks of one layer; 45 go to the windows, so the
    # global layer holds 155 blocks: 2480 tokens
    assert c.resolve_num_blocks(6000, available=400_000) == 155
    assert c.max_model_len == 2480 and c.num_local_blocks == 9


def test_a_count_sizes_the_global_pool_and_as_many_windows() -> None:
    c = _mixed(num_kv_blocks=512, max_model_len_given=True)
    assert c.resolve_num_blocks(6000) == 512
    assert c.num_local_blocks == 18  # 2 sequences of 256 blocks: 2 windows of 9
    assert c.resolve_num_blocks(6000) == 512 and c.num_local_blocks == 18  # resolved once
    with pytest.raises(ValueError, match=r"holds 100 blocks of 16 tokens \(num_kv_blocks=100\)"):
        _mixed(num_kv_blocks=100, max_model_len_given=True).resolve_num_blocks(6000)


def test_a_mixed_budget_too_small_names_blocks_of_one_layer() -> None:
    c = _mixed(kv_cache_memory_bytes=100_000, max_model_len_given=True)
    with pytest.raises(ValueError) as info:
        c.resolve_num_blocks(6000)
    assert "holds 100 blocks of 16 tokens of one layer (kv_cache_memory_bytes=100000" in str(
        info.value
    )
    assert "max_model_len=4096 needs 301" in str(info.value)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_cgroup_v2_headroom(tmp_path: Path) -> None:
    files = {"memory.max": "1000000\n", "memory.current": "400000\n"}
    root = _write(tmp_path, {**files, "memory.stat": "anon 5\ninactive_file 100000\n"})
    assert cgroup_headroom(root) == 700_000  # the page cache it may drop counts free
    (root / "memory.max").write_text("max\n")
    assert cgroup_headroom(root) is None


def test_cgroup_v1_headroom(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "memory/memory.limit_in_bytes": "2000000",
            "memory/memory.usage_in_bytes": "1500000",
            "memory/memory.stat": "total_inactive_file 0\n",
        },
    )
    assert cgroup_headroom(root) == 500_000
    (root / "memory/memory.limit_in_bytes").write_text("9223372036854771712")
    assert cgroup_headroom(root) is None
    assert cgroup_headroom(tmp_path / "none") is None


def test_this_machine_has_memory_available() -> None:
    cpu = available_memory(torch.device("cpu"))
    assert 0 < cpu <= host_available()
