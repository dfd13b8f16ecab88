"""GGUF block weights against fp32 in the same run: ``python benchmarks/linear.py --gguf``.

Every linear layer of the model (forward order, as :func:`linear.shapes` lists them) is
made from one set of random fp32 weights, then kept in each GGUF format asked for
(default Q4_1, Q5_0, the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, and the 16-bit floats
F16, BF16, kept as stored: x in fp32 for those). For each token count M the whole set
is run once per pass, so the weights stream from memory as in a forward pass; the table
gives each format's weight bytes, ms per pass (the best pass of three interleaved
rounds), the weights' read rate (GB/s: bytes per
pass / time) and its speed as a ratio to fp32 (the packed C / oneDNN kernel, the
engines' fp32 path) and to Q4_1.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor

from tandem.kernels.gguf_blocks import BY_NAME, QuantWeight, quantize
from tandem.kernels.ops.gguf_linear import linear_gguf
from tandem.kernels.ops.linear import linear, pack_native, pack_weight

DEFAULT = ("Q4_1", "Q5_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16")
ROUNDS = 3


def best_call(fn: Callable[[], None], seconds: float) -> float:
    """The fastest of the calls made in ``seconds`` (after one warm-up): on a shared
    machine the least disturbed pass is the kernel's own speed."""
    fn()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def table(
    shapes: list[tuple[int, int]], names: list[str], ms: list[int], seconds: float
) -> list[str]:
    """The comparison's lines; ``shapes`` (K, N) of each layer, ``names`` GGUF formats."""
    bad = [n for n in names if n not in BY_NAME]
    if bad:
        raise SystemExit(f"--gguf formats must be among {sorted(BY_NAME)}, got {bad}")
    gen = torch.Generator().manual_seed(0)
    floats = [(torch.randn(n, k, generator=gen) * k**-0.5, k) for k, n in shapes]
    packs = [pack_native(w) or pack_weight(w) for w, _ in floats]
    quant: dict[str, list[QuantWeight]] = {
        name: [quantize(w, BY_NAME[name]) for w, _ in floats] for name in names
    }
    sizes = {"fp32": sum(w.numel() * 4 for w, _ in floats)}
    sizes |= {name: sum(q.data.nbytes for q in qs) for name, qs in quant.items()}
    lines = [
        f"{len(shapes)} linear layers, fp32 weights {sizes['fp32'] / 1e6:.1f} MB; "
        f"threads={torch.get_num_threads()}",
        f"{'M':>5} {'weights':<7}{'MB':>9}{'ms/pass':>10}{'GB/s':>8}{'x fp32':>8}{'x Q4_1':>8}",
    ]
    for m in ms:
        xs = {k: torch.randn(m, k, generator=gen) for k, _ in shapes}

        def run_fp32(xs: dict[int, Tensor] = xs) -> None:
            for (w, k), p in zip(floats, packs):
                linear(xs[k], w, None, p)

        runs = {"fp32": run_fp32}
        for name, qs in quant.items():

            def run_q(qs: list[QuantWeight] = qs, xs: dict[int, Tensor] = xs) -> None:
                for q in qs:
                    linear_gguf(xs[q.k], q)

            runs[name] = run_q
        times = dict.fromkeys(runs, float("inf"))
        for _ in range(ROUNDS):  # formats in turn, so a busy moment does not hit one only
            for name, fn in runs.items():
                times[name] = min(times[name], best_call(fn, seconds / ROUNDS))
        for name, t in times.items():
            vs_q41 = f"{times['Q4_1'] / t:8.2f}" if "Q4_1" in times else f"{'-':>8}"
            lines.append(
                f"{m:>5} {name:<7}{sizes[name] / 1e6:9.1f}{t * 1e3:10.2f}"
                f"{sizes[name] / t / 1e9:8.1f}{times['fp32'] / t:8.2f}{vs_q41}"
            )
    return lines
