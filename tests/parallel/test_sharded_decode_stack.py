"""Tensor-parallel ranks decode through the one-call C stack (each rank its shard, the
sums after o and down called back from C) and give the tokens and logits of the modules,
bit for bit (gloo, one process per rank)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tandem.kernels.native import decode_stack as native

from .test_sharded_forward import run_ranks

RANK = Path(__file__).with_name("rank_decode.py")
# pre norms with q/k/v biases; sandwich norms, GeGLU and soft caps; q/k norms per head
ARCHS = ["qwen2", "gemma2", "qwen3"]

pytestmark = pytest.mark.skipif(not native.available(), reason="the C kernels did not build")


def test_two_ranks_decode_through_the_c_stack_as_through_the_modules(tmp_path: Path) -> None:
    run_ranks(2, ARCHS, tmp_path, dtype=None, script=RANK)
    for arch in ARCHS:
        runs = torch.load(tmp_path / f"{arch}.pt")
        (c_tokens, c_logits, c_line), (m_tokens, m_logits, m_line) = runs["c"], runs["modules"]
        assert "on cpu x2 ranks" in c_line and "decode c (" in c_line, (arch, c_line)
        assert "rank 0 of 2, a sum over the ranks after o and down" in c_line, (arch, c_line)
        assert "decode modules (decode_stack='modules')" in m_line, (arch, m_line)
        assert torch.equal(c_tokens, m_tokens), arch
        assert torch.equal(c_logits, m_logits), (arch, (c_logits - m_logits).abs().max())
