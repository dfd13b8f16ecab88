"""The sliding-window block arithmetic against a brute-force count of what queries read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.kv.window import blocks_behind, kv_window, peak_blocks


def test_kv_window_needs_every_layer_windowed() -> None:
    assert kv_window([8, 8, 4]) == 8
    assert kv_window([8, None]) is None  # Gemma's alternation keeps full tables
    assert kv_window([]) is None and kv_window([0, 4]) is None


@settings(max_examples=300, deadline=None)
@given(
    window=st.integers(1, 40),
    block_size=st.sampled_from([1, 2, 4, 8, 16]),
    start=st.integers(0, 200),
    step=st.integers(1, 40),
)
def test_against_the_positions_queries_read(
    window: int, block_size: int, start: int, step: int
) -> None:
    # queries start .. start + step - 1; query p reads keys max(0, p - window + 1) .. p
    read = {
        k // block_size
        for p in range(start, start + step)
        for k in range(p - window + 1, p + 1)
        if k >= 0
    }
    # every block before the first one read is behind; the first one read is not
    assert blocks_behind(start, window, block_size) == min(read)
    assert len(read) <= peak_blocks(window, step, block_size)
    # and the bound is reached for some alignment of the same window and step
    spans = []
    for shift in range(block_size):
        p0 = start + window + shift  # far enough from position 0 for a whole window
        spans.append(len({k // block_size for k in range(p0 - window + 1, p0 + step)}))
    assert max(spans) == peak_blocks(window, step, block_size)
