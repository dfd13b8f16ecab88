"""The layers whose output needs the other ranks: a row-parallel linear layer (the sum
after attention's output projection and the MLP's down projection) and the embedding of
a vocabulary split over ranks.

Column-parallel projections need no layer of their own: they are plain
:class:`~tandem.core.layers.linear.Linear` layers over this rank's output features,
whose :class:`~tandem.core.parallel.layout.Layout` the owning block declares.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tandem.core.layers.embedding import Embedding
from tandem.core.layers.linear import Linear
from tandem.core.parallel.group import TensorParallel
from tandem.core.parallel.layout import Layout, owned_by_first, split
from tandem.core.parallel.partition import even_range, padded_range


class RowParallelLinear(Linear):
    """``Linear`` over this rank's slice of the input features; the ranks' outputs are
    summed. The bias is rank 0's alone, so the sum adds it once."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool, dtype: Any, tp: TensorParallel
    ) -> None:
        lo, hi = even_range(in_features, tp.size, tp.rank)
        super().__init__(hi - lo, out_features, bias=bias, dtype=dtype)
        self.tp = tp
        self.tp_layouts: dict[str, Layout] = {
            "weight": split((out_features, in_features), 1, (lo, hi)),
            "bias": owned_by_first((out_features,), tp.rank),
        }

    def forward(self, x: Tensor) -> Tensor:
        # x: [T, K / ranks] -> [T, N], summed over the ranks
        return self.tp.all_reduce(super().forward(x))


class VocabParallelEmbedding(Embedding):
    """This rank's rows of the vocabulary (padded to a multiple of the ranks); a token
    looked up elsewhere is a zero row here, and the sum over ranks fills it in. The rows
    are read from the table's form (a float table, or its GGUF blocks kept as stored)."""

    def __init__(
        self, vocab_size: int, hidden_size: int, tp: TensorParallel, dtype: Any = None
    ) -> None:
        (lo, hi), local = padded_range(vocab_size, tp.size, tp.rank)
        super().__init__(local, hidden_size, dtype=dtype)
        self.start, self.stop = lo, hi
        self.tp = tp
        self.tp_layouts: dict[str, Layout] = {
            "weight": split((vocab_size, hidden_size), 0, (lo, hi))
        }

    def forward(self, ids: Tensor) -> Tensor:
        # ids: [T] -> [T, C]
        mine = (ids >= self.start) & (ids < self.stop)  # [T]
        local = torch.where(mine, ids - self.start, torch.zeros_like(ids))
        x = self.form.rows(local).to(self.out_dtype)  # [T, C]: floats, or GGUF rows decoded
        return self.tp.all_reduce(x.masked_fill_(~mine[:, None], 0))


def vocab_layout(vocab_size: int, hidden_size: int, tp: TensorParallel) -> tuple[Layout, int]:
    """An LM head's rows on this rank, and their padded count."""
    (lo, hi), local = padded_range(vocab_size, tp.size, tp.rank)
    return split((vocab_size, hidden_size), 0, (lo, hi)), local


def collect_layouts(model: torch.nn.Module) -> dict[str, Layout]:
    """Every parameter's layout that a module of ``model`` declares, by full name."""
    out: dict[str, Layout] = {}
    for prefix, module in model.named_modules():
        for name, layout in getattr(module, "tp_layouts", {}).items():
            out[f"{prefix}.{name}" if prefix else name] = layout
    return out
