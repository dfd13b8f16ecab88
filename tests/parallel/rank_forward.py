"""One rank of a tensor-parallel forward: ``python rank_forward.py RANK SIZE PORT OUT
DTYPE ARCH...``. Loads each architecture's tiny checkpoint as this rank's shard, runs a
prefill and a decode, and (rank 0) saves the logits to OUT/ARCH.pt."""

from __future__ import annotations

from pathlib import Path

import torch

from tandem.core.engine.loader import load_model
from tandem.core.kv.cache import allocate_kv_caches
from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.parallel.partition import kv_head_range
from tandem.core.testing import make_model

if __package__:  # imported by a test (for logits): a module of this package
    from .rank_group import in_group, run_rank
else:  # run as a rank: this folder is sys.path[0]
    from rank_group import in_group, run_rank

PROMPT = [3, 17, 99, 250, 7, 8, 300, 41, 5, 6, 77, 2, 11, 400, 123, 13, 1, 9, 10, 200]


def logits(arch: str, tp: object, dtype: torch.dtype) -> torch.Tensor:
    """Logits of every prompt position, then of one decoded token: [T + 1, V]."""
    model = load_model(str(make_model(size="tiny", arch=arch)), "cpu", dtype, tp=tp)
    return prompt_logits(model, tp, dtype)


def prompt_logits(model: torch.nn.Module, tp: object, dtype: torch.dtype) -> torch.Tensor:
    """``model``'s (this rank's shard, under ``tp``) logits of every prompt position, then
    of one decoded token: [T + 1, V]."""
    spec = model.spec
    rank, size = (tp.rank, tp.size) if tp is not None else (0, 1)
    k0, k1 = kv_head_range(spec.num_kv_heads, size, rank)
    caches = allocate_kv_caches(spec.num_layers, k1 - k0, spec.head_dim, 4, 16, dtype, "cpu")
    prompt = [t % spec.vocab_size for t in PROMPT]  # as they are in a vocabulary of 401+
    n = len(prompt)
    cpu = torch.device("cpu")
    with torch.inference_mode():
        meta = build_metadata([n], [n], [[0, 1]], 16, cpu)
        prefill = model.compute_logits(model(torch.tensor(prompt), torch.arange(n), caches, meta))
        nxt = prefill[-1:].argmax(-1)
        meta = build_metadata([1], [n + 1], [[0, 1]], 16, cpu)
        decode = model.compute_logits(model(nxt, torch.tensor([n]), caches, meta))
    return torch.cat([prefill, decode]).float()


def main(argv: list[str]) -> None:
    rank, size, port, out, dtype_name, *archs = argv
    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    with in_group(rank, size, port) as tp:
        for arch in archs:
            result = logits(arch, tp, dtype)
            if tp.rank == 0:
                torch.save(result, Path(out) / f"{arch}.pt")


if __name__ == "__main__":
    run_rank(main)
