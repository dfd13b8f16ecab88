"""One rank of a tensor-parallel greedy decode, with the C decode stack and without:
``python rank_decode.py RANK SIZE PORT OUT ARCH...``. Each architecture's tiny checkpoint
is loaded as this rank's shard twice (``decode_stack`` c, then modules); each run prefills
a prompt and decodes ``STEPS`` tokens one step at a time. Rank 0 saves, per architecture,
OUT/ARCH.pt: ``{choice: (tokens [STEPS], logits [STEPS, V], plan line)}``."""

from __future__ import annotations

from pathlib import Path

import torch
from rank_group import in_group, run_rank
from torch import Tensor

from tandem.core.engine.loader import load_model
from tandem.core.kv.cache import allocate_kv_caches
from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.layers.kernel_choice import KernelChoice
from tandem.core.models.plan import make_plan
from tandem.core.parallel.group import TensorParallel
from tandem.core.parallel.partition import kv_head_range
from tandem.core.testing import make_model

PROMPT = [3, 17, 99, 250, 7, 8, 300, 41, 5, 6, 77, 2]
STEPS = 12
BLOCK = 16


def decode(arch: str, tp: TensorParallel, stack: str) -> tuple[Tensor, Tensor, str]:
    """Greedy tokens and their logits of STEPS decode steps after PROMPT, and the plan line."""
    kernels = KernelChoice(attention="cpu", decode_stack=stack)
    path = str(make_model(size="tiny", arch=arch))
    model = load_model(path, "cpu", torch.float32, tp=tp, kernels=kernels)
    spec = model.spec
    k0, k1 = kv_head_range(spec.num_kv_heads, tp.size, tp.rank)
    f32 = torch.float32
    caches = allocate_kv_caches(spec.num_layers, k1 - k0, spec.head_dim, 4, BLOCK, f32, "cpu")
    cpu = torch.device("cpu")
    n = len(PROMPT)
    tokens, logits = [], []
    with torch.inference_mode():
        meta = build_metadata([n], [n], [[0, 1]], BLOCK, cpu)
        hidden = model(torch.tensor(PROMPT), torch.arange(n), caches, meta)
        nxt = model.compute_logits(hidden[-1:]).argmax(-1)
        for step in range(STEPS):
            meta = build_metadata([1], [n + step + 1], [[0, 1]], BLOCK, cpu)
            out = model.compute_logits(model(nxt, torch.tensor([n + step]), caches, meta))
            nxt = out.argmax(-1)
            tokens.append(nxt)
            logits.append(out)
    return torch.cat(tokens), torch.cat(logits), make_plan(model, "cpu").line()


def main(argv: list[str]) -> None:
    rank, size, port, out, *archs = argv
    torch.set_num_threads(1)
    with in_group(rank, size, port) as tp:
        for arch in archs:
            result = {stack: decode(arch, tp, stack) for stack in ("c", "modules")}
            if tp.rank == 0:
                torch.save(result, Path(out) / f"{arch}.pt")


if __name__ == "__main__":
    run_rank(main)
