"""The linear layers' matmul: ``F.linear`` (MKL), oneDNN and the C kernel on packed
weights (fp32), and int8; with ``--gguf``, GGUF block formats against fp32 and Q4_1.

    python benchmarks/linear.py [--size small|smollm2] [--threads N] [--seconds S]
                                [--rounds R] [--ms 1,16,64,256,2048] [--no-int8]
    python benchmarks/linear.py --gguf [Q4_1 Q2_K F16 ...] [--shape H,I,L,V] [--ms 1,16,64]

For each token count M (a decode batch up to a prefill chunk), runs every linear
layer of the model in turn (q/k/v, o, gate/up, down for all layers, then the logits
head) so the weights stream from memory as in a forward pass, and prints GFLOP/s of
each path and the ratios; at M=1 (decode: the weights' bytes are the cost) also the
GB/s of weights each fp32 path reads, to set beside the memory's bandwidth. ``--gguf``
prints instead, per format, the weights' bytes, ms per pass, GB/s read and the speed
ratios to fp32 and Q4_1 (:mod:`linear_gguf`);
``--shape`` sets hidden, intermediate, layers and vocabulary (heads of 64, a quarter of
them for k/v) in place of a model's (K-quants need rows of multiples of 256).
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AutoConfig

from tandem.core.testing import make_model
from tandem.kernels.ops.linear import linear, pack_native, pack_weight
from tandem.kernels.ops.linear_int8 import Int8Weight, linear_int8


def shapes(cfg) -> list[tuple[int, int]]:
    """(K, N) of every linear layer in forward order."""
    c, h, kvh = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or c // h
    layer = [(c, (h + 2 * kvh) * d), (h * d, c), (c, 2 * cfg.intermediate_size)]
    layer.append((cfg.intermediate_size, c))
    return layer * cfg.num_hidden_layers + [(c, cfg.vocab_size)]


def run_plain(layers: list[tuple[Tensor, int]], xs: dict[int, Tensor]) -> None:
    for w, k in layers:
        F.linear(xs[k], w)


def run_packed(
    layers: list[tuple[Tensor, int]], packed: list[Tensor | None], xs: dict[int, Tensor]
) -> None:
    for (w, k), p in zip(layers, packed):
        linear(xs[k], w, None, p)


def run_int8(layers: list[tuple[Int8Weight, int]], xs: dict[int, Tensor]) -> None:
    for w, k in layers:
        linear_int8(xs[k], w)


def rates(fns: list, flops: float, seconds: float, rounds: int) -> list[list[float]]:
    """GFLOP/s of each of ``fns`` (one pass each) in each of ``rounds`` rounds that take
    the paths in turn, ``seconds`` each in all: on a machine shared with other work, a
    slow moment then costs every path a round instead of one path its figure."""
    for fn in fns:
        for _ in range(2):
            fn()
    seen: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, got in zip(fns, seen):
            reps, start = 0, time.perf_counter()
            while reps == 0 or time.perf_counter() - start < seconds / rounds:
                fn()
                reps += 1
            got.append(flops * reps / (time.perf_counter() - start) / 1e9)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=("tiny", "small", "smollm2"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5, help="paths taken in turn, medians")
    parser.add_argument("--gguf", nargs="*", default=None, metavar="FORMAT")
    parser.add_argument("--shape", default=None, metavar="H,I,L,V")
    parser.add_argument("--ms", default=None, metavar="M,M,...", help="token counts")
    parser.add_argument("--no-int8", action="store_true", help="leave the int8 path out")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.shape is not None:
        h, inter, layers, vocab = (int(v) for v in args.shape.split(","))
        cfg = SimpleNamespace(hidden_size=h, num_attention_heads=h // 64, head_dim=64)
        cfg.__dict__.update(num_key_value_heads=max(1, h // 256), intermediate_size=inter)
        cfg.__dict__.update(num_hidden_layers=layers, vocab_size=vocab)
    if args.gguf is not None:
        from linear_gguf import DEFAULT, table

        if args.shape is None:
            cfg = AutoConfig.from_pretrained(make_model(size=args.size))
        ms = [int(v) for v in (args.ms or "1,16,64").split(",")]
        with torch.inference_mode():
            for line in table(shapes(cfg), args.gguf or list(DEFAULT), ms, args.seconds):
                print(line, flush=True)
        return
    if args.size == "smollm2":
        from tandem.core.catalog.default_model import gguf_file
        from tandem.core.gguf.export import exported

        path = exported(gguf_file())
    else:
        path = make_model(size=args.size)
    if args.shape is None:
        cfg = AutoConfig.from_pretrained(path)
    layers = [(torch.randn(n, k), k) for k, n in shapes(cfg)]
    packed = [pack_weight(w) for w, _ in layers]
    if any(p is None for p in packed):
        raise SystemExit("this torch build has no oneDNN for float32")
    native = [pack_native(w) for w, _ in layers]
    has_native = all(p is not None for p in native)
    int8 = [] if args.no_int8 else [(Int8Weight.pack(w), k) for w, k in layers]
    has_int8 = bool(int8) and all(w is not None for w, _ in int8)
    path_name = "C" if has_int8 and int8[0][0].native is not None else "torch._int_mm"
    print(f"model={args.size} threads={torch.get_num_threads()} linear layers={len(layers)}")
    if not args.no_int8:
        print(f"int8: {path_name if has_int8 else 'not available'} (GOP/s: int8 multiply-adds x 2)")
    head = f"{'M':>6}{'F.linear GF/s':>15}{'oneDNN GF/s':>13}{'ratio':>8}"
    if has_native:
        head += f"{'C GF/s':>9}{'/ oneDNN':>10}"
    if has_int8:
        head += f"{'int8 GOP/s':>12}{'/ oneDNN':>10}"
    print(head)
    weight_gb = sum(4.0 * w.numel() for w, _ in layers) / 1e9
    decode: list[str] = []
    with torch.inference_mode():
        for m in [int(v) for v in (args.ms or "1,16,64,256,2048").split(",")]:
            xs = {k: torch.randn(m, k) for _, k in layers}
            flops = sum(2.0 * m * w.numel() for w, _ in layers)
            fns = [partial(run_plain, layers, xs), partial(run_packed, layers, packed, xs)]
            fns += [partial(run_packed, layers, native, xs)] if has_native else []
            fns += [partial(run_int8, int8, xs)] if has_int8 else []
            seen = rates(fns, flops, args.seconds, args.rounds)
            got = [statistics.median(v) for v in seen]
            plain, fast = got[0], got[1]
            line = f"{m:>6}{plain:>15.1f}{fast:>13.1f}{fast / plain:>8.2f}"
            if has_native:
                c = got[2]
                line += f"{c:>9.1f}{c / fast:>10.2f}"
            if has_int8:
                q = got[-1]
                line += f"{q:>12.1f}{q / fast:>10.2f}"
            print(line, flush=True)
            if m == 1:  # one pass reads every weight once: GB/s = GFLOP/s * 4 bytes / 2 flops
                names = ["F.linear", "oneDNN"] + (["C"] if has_native else [])
                decode = [
                    f"{name} {2 * statistics.median(v):.1f} / {2 * max(v):.1f}"
                    for name, v in zip(names, seen)
                ]
    if decode:
        head = f"M=1 weights read ({weight_gb * 1e3:.0f} MB a pass), GB/s median / best round: "
        print(head + ", ".join(decode))


if __name__ == "__main__":
    main()
