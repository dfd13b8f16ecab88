"""Zeroed tensors on maps of their own, advised for huge pages (``tandem.kernels.memory``)."""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from tandem.kernels.memory import MIN_BYTES, mapped_zeros

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _mapping(ptr: int) -> dict[str, str] | None:
    """The /proc/self/smaps entry whose range holds ``ptr``: its fields, or None."""
    entry: dict[str, str] | None = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(part, 16) for part in head.split("-"))
                if entry is not None:
                    return entry
                entry = {} if lo <= ptr < hi else None
            elif entry is not None:
                key, _, value = line.partition(":")
                entry[key] = value.strip()
    return entry


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bfloat16])
def test_zeroed_contiguous_and_writable(dtype) -> None:
    shape = (3, MIN_BYTES // 3 + 5)
    t = mapped_zeros(shape, dtype)
    assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
    assert not t.any()
    t[2, -1] = 7
    assert t[2, -1] == 7 and int((t != 0).sum()) == 1


@linux
def test_large_tensor_is_advised_for_huge_pages() -> None:
    t = mapped_zeros((MIN_BYTES,), torch.int8)
    entry = _mapping(t.data_ptr())
    assert entry is not None, "the tensor's map is missing from /proc/self/smaps"
    assert "hg" in entry["VmFlags"].split(), entry["VmFlags"]


def test_small_tensor_is_an_ordinary_one() -> None:
    t = mapped_zeros((MIN_BYTES // 4 - 1,), torch.float32)
    assert t.shape == (MIN_BYTES // 4 - 1,) and not t.any()
    if sys.platform.startswith("linux"):
        entry = _mapping(t.data_ptr())
        assert entry is None or "hg" not in entry["VmFlags"].split()


@linux
def test_map_lives_as_long_as_a_view_and_no_longer() -> None:
    t = mapped_zeros((MIN_BYTES,), torch.int8)
    ptr = t.data_ptr()
    t.fill_(3)
    view = t[-10:]
    del t
    gc.collect()
    assert _mapping(ptr) is not None and int(view.sum()) == 30
    del view
    gc.collect()
    entry = _mapping(ptr)
    assert entry is None or "hg" not in entry["VmFlags"].split(), "the map outlived its tensors"
