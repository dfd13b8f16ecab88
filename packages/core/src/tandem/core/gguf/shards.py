"""A tensor-parallel rank's shard of a GGUF file's blocks, kept as stored.

:mod:`tandem.core.gguf.weights` loads a model from a GGUF file in one pass; where the
model is a rank's shard (built with a ``tp``), each kept tensor gives only the part this
rank holds. That part is chosen by the same :class:`~tandem.core.parallel.layout.Layout`
that picks a float checkpoint's shard (:func:`~tandem.core.parallel.layout.copies`), but
blocks are not floats: a run of rows (a column-parallel projection's outputs, a
vocabulary shard, a run of whole experts) is a slice of the stored rows, a view of the
file's mapping still, while a range of the inputs (a row-parallel projection: o, down)
is each row's blocks for that range, and must start and end on a block of the tensor's
format (32 values, 256 for a K-quant). Rows a shard holds past the real ones (the
vocabulary padded to a multiple of the ranks; all of a rank's rows where the vocabulary
ends before its share starts) are blocks of zeros, which every format reads as 0.

The rules live here, apart from the loading pass, so that what a rank can keep
(:func:`split_blocks`, asked before anything is read) and what it then takes
(:func:`shard_pieces`, :func:`padded_rows`) are one set of rules, each usable without a
file.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tandem.core.models.weights import Shard, shard_box
from tandem.core.parallel.layout import Layout, copies
from tandem.kernels.gguf_blocks import FORMATS, block_values, row_bytes


def param_layouts(model: nn.Module) -> dict[int, Layout]:
    """id(parameter) -> the tensor-parallel layout of its shard, for every parameter a
    module of ``model`` declares one for (none in a model built without ``tp``)."""
    from tandem.core.layers.parallel import collect_layouts

    layouts = collect_layouts(model)
    return {id(p): layouts[n] for n, p in model.named_parameters() if n in layouts}


def split_blocks(name: str, qtype: int, shard: Shard, layout: Layout) -> str | None:
    """Why checkpoint tensor ``name`` (GGUF type ``qtype``) cannot be kept in this rank's
    shard as whole blocks (an input range that starts or ends inside a block, or a shard
    that puts several input ranges side by side), or None where it can."""
    box = shard_box(shard, layout.full)
    k, size = box[-1][1], block_values(qtype)
    for src, dst in copies(layout, box):
        cols, local = src[-1], dst[-1]
        held = layout.local_shape()[-1]
        if (local.start, local.stop) != (0, held):
            return f"{name}: its shard of the inputs is several ranges"
        if cols.start % size or (cols.stop % size and cols.stop != k):
            return (
                f"{name}: K={k} split over tensor_parallel_size={k // held} gives {held} "
                f"inputs a rank, not a multiple of the {FORMATS[qtype][0]} block ({size} values)"
            )
    return None


def shard_pieces(
    data: Tensor, qtype: int, shard: Shard, layout: Layout, owned: bool
) -> list[tuple[int, int, int, Tensor]]:
    """This rank's (expert, row offset, GGUF type, rows) pieces of a stored tensor
    ``data`` (uint8 [rows, row bytes]) that fills ``shard`` of a parameter split by
    ``layout``: the same pieces :func:`~tandem.core.parallel.layout.copies` gives a float
    tensor, each a slice of whole rows, then of each row's blocks where the inputs are
    split (on a block: :func:`split_blocks` said so). A piece of a tensor that is not the
    file's (``owned``: its rows were moved) is copied, not to hold the whole of it."""
    box = shard_box(shard, layout.full)
    lead = 0 if shard.expert is None else 1
    k, size, per = box[-1][1], block_values(qtype), FORMATS[qtype][1]
    out = []
    for src, dst in copies(layout, box):
        rows, cols = src[lead], src[lead + 1]
        piece = data[rows]
        if (cols.start, cols.stop) != (0, k):
            piece = piece[:, cols.start // size * per : cols.stop // size * per]
        if owned and piece.shape != data.shape:
            piece = piece.clone()
        out.append((dst[0].start if lead else 0, dst[lead].start, qtype, piece))
    return out


def padded_rows(
    pieces: list[tuple[int, int, Tensor]], n: int, k: int, qtype: int
) -> list[tuple[int, int, Tensor]]:
    """A module's (row offset, GGUF type, rows) pieces in row order, with rows of zero
    blocks where none covers rows of ``[0, n)`` (a vocabulary shard's padding: every
    format reads zero bytes as 0), in the format of the piece they stand next to; all
    ``n`` rows zeros of type ``qtype`` where there is no piece (a rank past the end of a
    vocabulary with fewer rows than ranks, say 1 over 2: its shard is padding alone)."""
    out: list[tuple[int, int, Tensor]] = []

    def zeros(start: int, stop: int, qtype: int) -> None:
        if stop > start:
            out.append(
                (start, qtype, torch.zeros(stop - start, row_bytes(qtype, k), dtype=torch.uint8))
            )

    at = 0
    for offset, qtype, rows in pieces:
        zeros(at, offset, out[-1][1] if out else qtype)
        out.append((offset, qtype, rows))
        at = offset + rows.shape[0]
    zeros(at, n, out[-1][1] if out else qtype)
    return out
