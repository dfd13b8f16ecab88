"""Validation of the attention ops' arguments: shapes, dtypes, devices, and the values
C trusts (block ids inside the cache, lengths inside the tables, query offsets)."""

from __future__ import annotations

import itertools

from torch import Tensor

from tandem.kernels import checks


def _check_common(
    q: object,
    k_cache: object,
    v_cache: object,
    seq_lens: object,
    block_tables: object,
    scale: object,
    batch: int | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    qt = checks.tensor("q", q, 3, checks.FLOAT_DTYPES)
    kc, vc = checks.paged_cache(k_cache, v_cache)
    checks.heads("q", qt.shape[1], "k_cache", kc.shape[2])
    checks.dim("k_cache", kc, 3, qt.shape[2], "the head size q.shape[2]")
    sl = checks.tensor("seq_lens", seq_lens, 1, checks.INT_DTYPES)
    bt = checks.tensor("block_tables", block_tables, 2, checks.INT_DTYPES)
    if batch is not None:
        checks.dim("seq_lens", sl, 0, batch, "the number of sequences")
    checks.dim("block_tables", bt, 0, sl.shape[0], "seq_lens.shape[0]")
    checks.same_device(q=qt, k_cache=kc, v_cache=vc, seq_lens=sl, block_tables=bt)
    checks.number("scale", scale, positive=True)
    checks.seq_lens_fit(sl, bt, kc.shape[1], low=1)
    if bt.numel() and (int(bt.min()) < 0 or int(bt.max()) >= kc.shape[0]):
        raise ValueError(
            f"block_tables entries must be in [0, {kc.shape[0]}) (cache blocks), "
            f"got min {int(bt.min())} and max {int(bt.max())}"
        )
    return qt, kc, vc, sl, bt


def check_prefill(
    q: object,
    k: object,
    v: object,
    k_cache: object,
    v_cache: object,
    cu_seqlens_q: object,
    seq_lens: object,
    block_tables: object,
    scale: object,
    window: object = 0,
    softcap: object = 0.0,
) -> None:
    """Validate prefill arguments (reads cu_seqlens_q and seq_lens)."""
    check_window(window, softcap)
    cu = checks.tensor("cu_seqlens_q", cu_seqlens_q, 1, checks.INT_DTYPES)
    if cu.shape[0] < 1:
        raise ValueError("cu_seqlens_q must have B + 1 >= 1 entries, got an empty tensor")
    qt, kc, *_ = _check_common(q, k_cache, v_cache, seq_lens, block_tables, scale, cu.shape[0] - 1)
    for name, x in (("k", k), ("v", v)):
        t = checks.tensor(name, x, 3, checks.FLOAT_DTYPES)
        expected = (qt.shape[0], kc.shape[2], kc.shape[3])
        if tuple(t.shape) != expected:
            raise ValueError(
                f"{name} must have shape [T, KVH, D] = {expected}, got {tuple(t.shape)}"
            )
    starts = cu.tolist()
    q_lens = [b - a for a, b in itertools.pairwise(starts)]
    if starts[0] != 0 or starts[-1] != qt.shape[0] or any(n < 1 for n in q_lens):
        raise ValueError(
            f"cu_seqlens_q must rise strictly from 0 to the number of tokens {qt.shape[0]}, "
            f"got {starts}"
        )
    lens = seq_lens.tolist()
    if any(n > L for L, n in zip(lens, q_lens)):
        raise ValueError(f"seq_lens must be >= each sequence's query length {q_lens}, got {lens}")


def check_window(window: object, softcap: object) -> None:
    """``window``: an int >= 0 (0: none); ``softcap``: a number >= 0 (0: none)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0 (0: no sliding window), got {window!r}")
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or softcap < 0:
        raise ValueError(f"softcap must be a number >= 0 (0: no soft-capping), got {softcap!r}")


def check_decode(
    q: object,
    k_cache: object,
    v_cache: object,
    seq_lens: object,
    block_tables: object,
    scale: object,
    window: object = 0,
    softcap: object = 0.0,
) -> None:
    """Validate decode arguments (reads seq_lens and block_tables' ranges)."""
    check_window(window, softcap)
    qt = checks.tensor("q", q, 3, checks.FLOAT_DTYPES)
    _check_common(qt, k_cache, v_cache, seq_lens, block_tables, scale, qt.shape[0])
