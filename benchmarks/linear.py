"""The linear layers' matmul: ``F.linear`` (MKL) beside oneDNN with a packed weight.

    python benchmarks/linear.py [--size small] [--threads N] [--seconds S]

For each token count M (a decode batch up to a prefill chunk), runs every linear
layer of the model in turn (q/k/v, o, gate/up, down for all layers, then the logits
head) so the weights stream from memory as in a forward pass, and prints GFLOP/s of
both paths and their ratio.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AutoConfig

from tandem.core.testing import make_model
from tandem.kernels.ops.linear import linear, pack_weight


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


def rate(fn, flops: float, seconds: float) -> float:
    for _ in range(2):
        fn()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        reps += 1
    return flops * reps / (time.perf_counter() - start) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    cfg = AutoConfig.from_pretrained(make_model(size=args.size))
    layers = [(torch.randn(n, k), k) for k, n in shapes(cfg)]
    packed = [pack_weight(w) for w, _ in layers]
    if any(p is None for p in packed):
        raise SystemExit("this torch build has no oneDNN for float32")
    print(f"model={args.size} threads={torch.get_num_threads()} linear layers={len(layers)}")
    print(f"{'M':>6}{'F.linear GF/s':>15}{'oneDNN GF/s':>13}{'ratio':>8}")
    with torch.inference_mode():
        for m in (1, 16, 64, 256, 2048):
            xs = {k: torch.randn(m, k) for _, k in layers}
            flops = sum(2.0 * m * w.numel() for w, _ in layers)
            plain = rate(partial(run_plain, layers, xs), flops, args.seconds)
            fast = rate(partial(run_packed, layers, packed, xs), flops, args.seconds)
            print(f"{m:>6}{plain:>15.1f}{fast:>13.1f}{fast / plain:>8.2f}")


if __name__ == "__main__":
    main()
