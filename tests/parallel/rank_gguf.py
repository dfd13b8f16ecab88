"""One rank of a tensor-parallel forward on a GGUF file's blocks as stored: ``python
rank_gguf.py RANK SIZE PORT OUT FILE...``. Loads each file with ``quantization="gguf"``
as this rank's shard, runs a prefill and a decode (the C decode stack where it takes the
shard), saves the logits (rank 0: OUT/STEM.pt), the same without the GGUF kernels'
rounding of the activations to int8 (OUT/STEM.exact.pt: :func:`exact_logits`) and what
the rank holds (every rank: OUT/STEM.rankR.json, see :func:`held`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from tandem.core.engine.loader import load_model
from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.models.plan import make_plan
from tandem.kernels.native import linear_gguf as native_gguf

if __package__:  # imported by a test (for held, gguf_model): a module of this package
    from .rank_forward import prompt_logits
    from .rank_group import in_group, run_rank
else:  # run as a rank: this folder is sys.path[0]
    from rank_forward import prompt_logits
    from rank_group import in_group, run_rank


def gguf_model(path: str, tp: object) -> torch.nn.Module:
    """``path``'s blocks as stored, this rank's shard (the whole model without ``tp``),
    on the default kernels (the C decode stack where it runs)."""
    kernels = resolve_kernels()
    return load_model(path, "cpu", torch.float32, quantization="gguf", tp=tp, kernels=kernels)


@contextmanager
def no_rounding() -> Iterator[None]:
    """The GGUF matmuls without the C kernels, which round the activations to int8 per
    block (a sum over the ranks, in another order, may round one the other way): the
    blocks dequantized and multiplied in float32."""
    real = native_gguf.linear
    native_gguf.linear = lambda *args, **kwargs: None
    try:
        yield
    finally:
        native_gguf.linear = real


def exact_logits(model: torch.nn.Module, tp: object) -> torch.Tensor:
    """``prompt_logits`` layer by layer, without the activations' int8 rounding."""
    model.use_kernels(resolve_kernels(decode_stack="modules"))
    with no_rounding():
        return prompt_logits(model, tp, torch.float32)


def held(model: torch.nn.Module, path: str) -> dict[str, Any]:
    """What a rank holds: the form of each weight (``forms``: module -> its form's names,
    one per expert of stacked experts), the modules that hold a float weight (``floats``),
    those whose blocks all lie in the mapping of the file ``path`` (``views``: not
    copied), the bytes of every weight kept in blocks (``block_bytes``), and its execution
    plan (``plan``: the decode path, its note, the ranks)."""
    from tandem.core.layers.embedding import Embedding
    from tandem.core.layers.linear import Linear
    from tandem.core.layers.moe import Stacked
    from tandem.core.layers.weight_form import GgufBlocks

    mapped = _mapped(path)
    forms: dict[str, list[str]] = {}
    floats: list[str] = []
    views: list[str] = []
    block_bytes = 0
    for name, module in model.named_modules():
        if isinstance(module, (Linear, Embedding)):
            kept = [module.form]
        elif isinstance(module, Stacked):
            kept = module.forms
        else:
            continue
        forms[name] = [form.name for form in kept]
        if module.weight is not None:
            floats.append(name)
        parts = [p for f in kept if isinstance(f, GgufBlocks) for p in f.parts]
        block_bytes += sum(p.data.nbytes for p in parts)
        starts = [p.data.data_ptr() for p in parts]
        if parts and all(any(lo <= at < hi for lo, hi in mapped) for at in starts):
            views.append(name)
    plan = make_plan(model, "cpu")
    return {
        "forms": forms,
        "floats": floats,
        "views": views,
        "block_bytes": block_bytes,
        "plan": [plan.decode, plan.decode_note, plan.tensor_parallel],
    }


def _mapped(path: str) -> list[tuple[int, int]]:
    """The address ranges of this process's mappings of the file ``path``."""
    real = str(Path(path).resolve())
    out = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == real:
            lo, hi = fields[0].split("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out


def main(argv: list[str]) -> None:
    rank, size, port, out, *files = argv
    torch.set_num_threads(1)
    with in_group(rank, size, port) as tp:
        for file in files:
            model = gguf_model(file, tp)
            result = prompt_logits(model, tp, torch.float32)
            stem = Path(file).stem
            report = json.dumps(held(model, file))  # its plan: before exact_logits's kernels
            exact = exact_logits(model, tp)
            if tp.rank == 0:
                torch.save(result, Path(out) / f"{stem}.pt")
                torch.save(exact, Path(out) / f"{stem}.exact.pt")
            (Path(out) / f"{stem}.rank{tp.rank}.json").write_text(report)


if __name__ == "__main__":
    run_rank(main)
