"""A model split over ranks (gloo, one process per rank) gives the logits of the whole
model: every architecture that splits, at 2 ranks and (slow) at 4."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tandem.core.testing import make_model

from .rank_forward import logits

RANK = Path(__file__).with_name("rank_forward.py")
SPLIT_ARCHS = [
    "llama",  # 2 KV heads: one per rank at 2, each shared by two ranks at 4
    "mistral",  # one KV head, held by every rank; head_dim != hidden / heads
    "qwen2",  # q/k/v biases, tied LM head
    "qwen3",  # q/k norms per head, 6 heads
    "phi3",  # q/k/v and gate/up fused in the checkpoint
    "gemma2",  # soft caps, sandwich norms, GeGLU
    "mixtral",  # 4 experts, top-2
    "qwen2_moe",  # 6 experts (uneven over 4 ranks), a gated shared expert
    "qwen3_moe",  # 8 experts, a dense first layer
    "deepseek_v3",  # latent attention (q through its own latent), each rank its heads
    "deepseek_v3_plain",  # latent attention with q straight from the hidden state
]


def run_ranks(
    size: int,
    archs: list[str],
    out: Path,
    dtype: str | None = "float32",
    script: Path = RANK,
    premake: bool = True,
) -> None:
    """``script`` (a rank's program) in ``size`` processes, with the rank, the size, the
    rendezvous port, ``out``, ``dtype`` (where not None) and ``archs`` (their checkpoints
    made here first unless not ``premake``)."""
    for arch in archs if premake else ():
        make_model(size="tiny", arch=arch)  # made once, here, not by every rank
    store = dist.TCPStore("127.0.0.1", 0, size, is_master=True, wait_for_workers=False)
    try:
        cmd = [sys.executable, str(script)]
        tail = [*([] if dtype is None else [dtype]), *archs]
        procs = [
            subprocess.Popen([*cmd, str(r), str(size), str(store.port), str(out), *tail])
            for r in range(size)
        ]
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        del store
    assert codes == [0] * size


def _compare(
    archs: list[str], out: Path, dtype: torch.dtype, tol: float, agree: float = 1.0
) -> None:
    """Logits within ``tol``; the top token the same at ``agree`` of the positions (sums
    taken in another order round differently in bf16, which flips near ties)."""
    for arch in archs:
        whole = logits(arch, None, dtype)
        split = torch.load(out / f"{arch}.pt")
        assert split.shape == whole.shape, arch
        assert torch.allclose(split, whole, atol=tol, rtol=0), (arch, (split - whole).abs().max())
        same = (split.argmax(-1) == whole.argmax(-1)).float().mean().item()
        assert same >= agree, (arch, same)


def test_two_ranks_give_the_whole_model(tmp_path: Path) -> None:
    archs = ["llama", "mistral", "phi3", "qwen2_moe"]
    run_ranks(2, archs, tmp_path)
    _compare(archs, tmp_path, torch.float32, 1e-4)


def test_two_ranks_split_latent_attention_by_heads(tmp_path: Path) -> None:
    """Each rank its heads' rows of q and kv_b and their columns of o; the latent row
    (one shared KV head) written by every rank into its own cache."""
    archs = ["deepseek_v3", "deepseek_v3_plain"]
    run_ranks(2, archs, tmp_path)
    _compare(archs, tmp_path, torch.float32, 1e-4)


@pytest.mark.slow
def test_two_ranks_give_the_whole_model_of_every_architecture_that_splits(
    tmp_path: Path,
) -> None:
    run_ranks(2, SPLIT_ARCHS, tmp_path)
    _compare(SPLIT_ARCHS, tmp_path, torch.float32, 1e-4)


@pytest.mark.slow
def test_four_ranks_give_the_whole_model(tmp_path: Path) -> None:
    archs = ["llama", "mistral", "qwen2_moe", "mixtral"]
    run_ranks(4, archs, tmp_path)
    _compare(archs, tmp_path, torch.float32, 1e-4)


@pytest.mark.slow
def test_two_ranks_in_bfloat16(tmp_path: Path) -> None:
    run_ranks(2, ["llama", "mixtral"], tmp_path, "bfloat16")
    _compare(["llama", "mixtral"], tmp_path, torch.bfloat16, 0.15, agree=0.9)
