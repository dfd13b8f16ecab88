"""The 32-value block rows (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) at decode, where the kernel takes
two weight rows at a time: against the ``gguf`` package's dequantization, and each weight
row's result the same, bit for bit, whether it ran beside another row or alone (the
decode stack's results must not depend on how a band of rows was split)."""

from __future__ import annotations

import pytest
import torch
from gguf_cases import int8_bound, weight_and_x
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tandem.kernels.gguf_blocks import FORMATS
from tandem.kernels.native import linear_gguf as native

BLOCKS32 = (2, 3, 6, 7, 8)  # Q4_0, Q4_1, Q5_0, Q5_1, Q8_0


def _theirs(data: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize

    kind = gguf.GGMLQuantizationType[FORMATS[qtype][0]]
    return torch.from_numpy(dequantize(data.numpy(), kind)).reshape(data.shape[0], k)


@settings(max_examples=40, deadline=None)
@given(
    qtype=st.sampled_from(BLOCKS32),
    m=st.integers(1, 4),
    blocks=st.integers(1, 13),
    n=st.integers(1, 19),
    seed=st.integers(0, 2**31 - 1),
)
@example(qtype=6, m=1, blocks=20, n=9, seed=0)  # Q5_0 steps of four, a band and a tail
@example(qtype=6, m=2, blocks=7, n=3, seed=1)  # a pair and an odd block left, odd rows
@example(qtype=8, m=1, blocks=5, n=2, seed=2)
@example(qtype=2, m=2, blocks=6, n=16, seed=3)
@example(qtype=3, m=1, blocks=3, n=11, seed=4)
@example(qtype=7, m=3, blocks=9, n=5, seed=5)  # three rows of x: one weight row at a time
def test_decode_rows_match_the_gguf_package(qtype, m, blocks, n, seed) -> None:
    k = 32 * blocks
    qw, x = weight_and_x(qtype, n, m, k, seed)
    got = native.linear(x, qw.data, qtype, k, tiles=False)
    if got is None:
        pytest.skip("no C kernels here")
    w = _theirs(qw.data, qtype, k)
    assert ((got - x @ w.t()).abs() <= int8_bound(x, w)).all()
    alone = [native.linear(x, qw.data[i : i + 1], qtype, k, tiles=False) for i in range(n)]
    assert torch.equal(got, torch.cat(alone, dim=1))
