"""Where a rank's shard of a parameter comes from in the full (checkpoint) parameter.

A :class:`Layout` lists, per dimension, the ranges of the full parameter the rank holds,
laid end to end (q heads, then k heads, then v heads of a fused projection, say). The
loader hands :func:`copies` the box a checkpoint tensor fills in the full parameter and
gets back the (source, destination) slices that land in this rank's shard, so a sharded
model streams its checkpoint one tensor at a time, like an unsharded one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tandem.core.parallel.partition import Range

Pieces = tuple[Range, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    """``full``: the unsplit shape; ``pieces[d]``: the ranges of dimension d held, in
    order (None: all of it); ``owner`` False: the rank holds zeros instead (a bias added
    after a sum over ranks is held by rank 0 only)."""

    full: tuple[int, ...]
    pieces: tuple[Pieces | None, ...]
    owner: bool = True

    def local_shape(self) -> tuple[int, ...]:
        return tuple(
            n if p is None else sum(b - a for a, b in p) for n, p in zip(self.full, self.pieces)
        )


def split(full: tuple[int, ...], dim: int, *ranges: Range) -> Layout:
    """``full`` split along ``dim`` into ``ranges`` (end to end), whole elsewhere."""
    pieces: list[Pieces | None] = [None] * len(full)
    pieces[dim] = tuple(ranges)
    return Layout(tuple(full), tuple(pieces))


def owned_by_first(full: tuple[int, ...], rank: int) -> Layout:
    """Whole on rank 0, zeros elsewhere."""
    return Layout(tuple(full), (None,) * len(full), owner=rank == 0)


def _dim_copies(box: Range, pieces: Pieces | None, size: int) -> list[tuple[slice, slice]]:
    """(source slice within the box, destination slice within the shard) along one dim."""
    held = pieces if pieces is not None else ((0, size),)
    out = []
    at = 0  # where the current piece starts in the shard
    for a, b in held:
        lo, hi = max(a, box[0]), min(b, box[1])
        if lo < hi:
            out.append((slice(lo - box[0], hi - box[0]), slice(at + lo - a, at + hi - a)))
        at += b - a
    return out


def copies(
    layout: Layout, box: tuple[Range, ...]
) -> list[tuple[tuple[slice, ...], tuple[slice, ...]]]:
    """The copies that bring a tensor filling ``box`` of the full parameter into the
    shard: ``shard[dst] = tensor[src]`` for each pair (none: the box is not held here)."""
    if not layout.owner:
        return []
    per_dim = [
        _dim_copies(b, p, n) for b, p, n in zip(box, layout.pieces, layout.full, strict=True)
    ]
    return [
        (tuple(s for s, _ in combo), tuple(d for _, d in combo))
        for combo in itertools.product(*per_dim)
    ]
