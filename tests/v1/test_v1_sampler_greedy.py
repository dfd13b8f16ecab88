"""The sampler's all-greedy fast path agrees with its general path."""

from __future__ import annotations

import torch

from tandem.v1.worker.input_batch import InputBatch
from tandem.v1.worker.sampler import Sampler, SamplingBatch


def _batch(rows: int, max_logprobs: int) -> SamplingBatch:
    empty = torch.zeros(0, dtype=torch.int64)
    return SamplingBatch(
        rows=torch.arange(rows),
        counters=torch.zeros(rows, dtype=torch.int64),
        mask_rows=empty,
        mask_tokens=empty,
        max_logprobs=max_logprobs,
        any_penalties=False,
        any_sampling=False,
    )


def test_greedy_fast_path_matches_general_path():
    torch.manual_seed(0)
    batch = InputBatch(5, 8, 50)  # fresh rows: temperature 0, i.e. greedy
    logits = torch.randn(5, 50) * 4
    fast = Sampler()(logits, batch, _batch(5, -1))
    full = Sampler()(logits, batch, _batch(5, 0))  # asking for logprobs: general path
    assert torch.equal(fast.tokens, full.tokens)
    assert torch.equal(fast.tokens, logits.argmax(dim=-1))
    torch.testing.assert_close(fast.logprobs, full.logprobs, atol=1e-5, rtol=1e-5)
    assert torch.equal(fast.token_ids, full.token_ids)
    assert torch.equal(fast.ranks, full.ranks)


def test_a_row_that_fails_fails_alone():
    torch.manual_seed(0)
    batch = InputBatch(3, 8, 50)
    batch.temperature[:] = 1.0
    batch.top_p[1] = 0.0  # the kernel refuses it: the batched call raises
    logits = torch.randn(3, 50)
    logits[2, 7] = float("nan")  # a NaN row: no valid distribution
    sb = SamplingBatch(
        rows=torch.arange(3),
        counters=torch.zeros(3, dtype=torch.int64),
        mask_rows=torch.zeros(0, dtype=torch.int64),
        mask_tokens=torch.zeros(0, dtype=torch.int64),
        max_logprobs=1,
        any_penalties=False,
        any_sampling=True,
    )
    out = Sampler()(logits, batch, sb)
    assert sorted(out.failed) == [1, 2]
    assert out.failed[1].startswith("ValueError: p must be in (0, 1]")
    assert "NaN" in out.failed[2]
    alone = Sampler()(logits[:1], batch, sb.pick(0))
    assert int(out.tokens[0]) == int(alone.tokens[0]) and not alone.failed
    assert out.logprobs.shape == (3, 2)
