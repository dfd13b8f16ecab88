"""Bad input to the public op entry points: a clear error naming the field."""

from __future__ import annotations

import pytest
import torch

from tandem.kernels import ops


def _prefill_args(paged_case, **change):
    case = paged_case(1, [3, 2], [0, 4], 4, 2, 8, 4)
    args = dict(
        q=case.q,
        k=case.k,
        v=case.v,
        k_cache=case.k_cache,
        v_cache=case.v_cache,
        cu_seqlens_q=case.cu_seqlens_q,
        seq_lens=case.seq_lens,
        block_tables=case.block_tables,
        scale=case.scale,
    )
    args.update(change)
    return args


def _decode_args(paged_case, **change):
    case = paged_case(2, [1, 1], [3, 6], 4, 2, 8, 4)
    args = dict(
        q=case.q,
        k_cache=case.k_cache,
        v_cache=case.v_cache,
        seq_lens=case.seq_lens,
        block_tables=case.block_tables,
        scale=case.scale,
    )
    args.update(change)
    return args


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: ops.rms_norm([1.0], torch.ones(1), 1e-6), TypeError, "x must be a torch"),
        (
            lambda: ops.rms_norm(torch.ones(2, 4), torch.ones(3), 1e-6),
            ValueError,
            r"weight\.shape\[0\] must equal x\.shape\[-1\] \(4\)",
        ),
        (lambda: ops.rms_norm(torch.ones(2, 4), torch.ones(4), -1.0), ValueError, "eps"),
        (lambda: ops.rms_norm(torch.ones(2, 4), torch.ones(4), "1"), TypeError, "eps"),
        (
            lambda: ops.rms_norm(torch.ones(2, 4, dtype=torch.int64), torch.ones(4), 1e-6),
            ValueError,
            "x must have dtype in",
        ),
        (
            lambda: ops.fused_add_rms_norm(torch.ones(2, 4), torch.ones(3, 4), torch.ones(4), 1e-6),
            ValueError,
            "residual must have the shape of x",
        ),
        (lambda: ops.silu_and_mul(torch.ones(2, 5)), ValueError, "even last dimension"),
        (
            lambda: ops.rotary_embedding(
                torch.tensor([0]), torch.ones(1, 2, 6), torch.ones(1, 1, 6), torch.ones(4, 8)
            ),
            ValueError,
            "cos_sin_cache",
        ),
        (
            lambda: ops.rotary_embedding(
                torch.tensor([0]), torch.ones(1, 2, 5), torch.ones(1, 1, 5), torch.ones(4, 5)
            ),
            ValueError,
            "must be even",
        ),
        (
            lambda: ops.rotary_embedding(
                torch.tensor([4]), torch.ones(1, 2, 8), torch.ones(1, 1, 8), torch.ones(4, 8)
            ),
            ValueError,
            r"positions must be in \[0, 4\)",
        ),
        (
            lambda: ops.rotary_embedding(
                torch.tensor([0.0]), torch.ones(1, 2, 8), torch.ones(1, 1, 8), torch.ones(4, 8)
            ),
            ValueError,
            "positions must have dtype",
        ),
        (
            lambda: ops.write_kv_cache(
                torch.ones(2, 1, 4),
                torch.ones(2, 1, 4),
                torch.zeros(2, 2, 1, 4),
                torch.zeros(2, 2, 1, 4),
                torch.tensor([0, 4]),
            ),
            ValueError,
            "slot_mapping values",
        ),
        (
            lambda: ops.write_kv_cache(
                torch.ones(2, 1, 4),
                torch.ones(2, 1, 4),
                torch.zeros(2, 2, 1, 4),
                torch.zeros(2, 2, 2, 4),
                torch.tensor([0, 1]),
            ),
            ValueError,
            "v_cache must match",
        ),
        (
            lambda: ops.write_kv_cache(
                torch.ones(2, 2, 4),
                torch.ones(2, 2, 4),
                torch.zeros(2, 2, 1, 4),
                torch.zeros(2, 2, 1, 4),
                torch.tensor([0, 1]),
            ),
            ValueError,
            r"k\.shape\[1:\]",
        ),
        (
            lambda: ops.write_kv_cache(
                torch.ones(2, 1, 4),
                torch.ones(2, 1, 4),
                torch.zeros(2, 2, 1, 4),
                torch.zeros(2, 2, 1, 4),
                torch.tensor([0]),
            ),
            ValueError,
            "slot_mapping",
        ),
    ],
)
def test_elementwise_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: {"q": a["q"][:, :3]}, r"q heads \(3\) must be a multiple"),
        (lambda a: {"k": a["k"][:4]}, r"k must have shape \[T, KVH, D\]"),
        (
            lambda a: {"cu_seqlens_q": torch.tensor([0, 2, 4], dtype=torch.int32)},
            "cu_seqlens_q must rise strictly from 0",
        ),
        (lambda a: {"cu_seqlens_q": torch.tensor([0, 5], dtype=torch.int32)}, r"seq_lens\.shape"),
        (
            lambda a: {"seq_lens": torch.tensor([3, 1], dtype=torch.int32)},
            "seq_lens must be >= each sequence's query length",
        ),
        (
            lambda a: {"seq_lens": torch.tensor([3, 99], dtype=torch.int32)},
            r"seq_lens must be in \[1, \d+\]",
        ),
        (lambda a: {"block_tables": a["block_tables"] + 100}, "block_tables entries"),
        (lambda a: {"block_tables": a["block_tables"].float()}, "block_tables must have dtype"),
        (lambda a: {"scale": 0.0}, "scale must be a finite number > 0"),
        (lambda a: {"v_cache": a["v_cache"].half()}, "v_cache must match k_cache"),
    ],
)
def test_prefill_bad_input(paged_case, change, match):
    args = _prefill_args(paged_case)
    with pytest.raises(ValueError, match=match):
        ops.prefill_attention(**{**args, **change(args)})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda a: {"q": a["q"][0]}, "q must have 3 dimensions"),
        (lambda a: {"seq_lens": a["seq_lens"][:1]}, r"seq_lens\.shape\[0\] must equal"),
        (
            lambda a: {"seq_lens": torch.tensor([0, 2], dtype=torch.int32)},
            r"seq_lens must be in \[1, ",
        ),
        (
            lambda a: {"k_cache": a["k_cache"][..., :4], "v_cache": a["v_cache"][..., :4]},
            r"k_cache\.shape\[3\] must equal the head size",
        ),
        (lambda a: {"block_tables": a["block_tables"][0]}, "block_tables must have 2 dimensions"),
    ],
)
def test_decode_bad_input(paged_case, change, match):
    args = _decode_args(paged_case)
    with pytest.raises(ValueError, match=match):
        ops.decode_attention(**{**args, **change(args)})
