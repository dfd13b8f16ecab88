"""Decode attention: the plain-torch kernel beside the C kernel (the ``cpu`` backend).

    python benchmarks/decode_attention.py [--size small|smollm2] [--batch 64] [--threads N]
                                          [--seconds S]

One decode step of the ``small`` model's attention shapes (8 heads, 4 KV heads, head
size 64, blocks of 16; ``--size smollm2``: SmolLM2-135M's 9 heads, 3 KV heads) over
``--batch`` sequences of 80..320 tokens whose blocks are
scattered through the cache. Every layer has its own cache, and the run cycles through
8 of them, so K/V stream from memory as in a real step. Prints ms per layer call of
both kernels and their ratio, after checking that they agree.
"""

from __future__ import annotations

import argparse
import time

import torch

from tandem.kernels.backends import available_backends, get_backend

SHAPES = {"small": (8, 4), "smollm2": (9, 3)}  # query heads, KV heads
HEAD_SIZE, BLOCK, LAYERS = 64, 16, 8


def ms_per_call(call, seconds: float) -> float:
    for _ in range(2):
        call()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        reps += 1
    return (time.perf_counter() - start) / reps / LAYERS * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    heads, kv_heads = SHAPES[args.size]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if "cpu" not in available_backends():
        raise SystemExit("the C kernels are not available here (no C compiler?)")
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(80, 321, (args.batch,), generator=g, dtype=torch.int32)
    width = -(-int(lens.max()) // BLOCK)
    blocks = args.batch * width
    tables = torch.randperm(blocks, generator=g)[: args.batch * width].view(args.batch, width)
    tables = tables.to(torch.int32)
    shape = (blocks, BLOCK, kv_heads, HEAD_SIZE)
    caches = [
        (torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(LAYERS)
    ]
    q = torch.randn(args.batch, heads, HEAD_SIZE, generator=g)
    scale = HEAD_SIZE**-0.5
    backends = {name: get_backend(name) for name in ("torch", "cpu")}

    def step(backend) -> None:
        for k, v in caches:
            backend.decode(q, k, v, lens, tables, scale)

    k, v = caches[0]
    want = backends["torch"].decode(q, k, v, lens, tables, scale)
    torch.testing.assert_close(backends["cpu"].decode(q, k, v, lens, tables, scale), want)
    kv_mb = 2 * int(lens.sum()) * kv_heads * HEAD_SIZE * 4 / 2**20
    print(
        f"{args.size}: heads={heads} kv_heads={kv_heads} batch={args.batch} "
        f"threads={torch.get_num_threads()} K/V read per layer {kv_mb:.1f} MiB"
    )
    times = {name: ms_per_call(lambda b=b: step(b), args.seconds) for name, b in backends.items()}
    for name, ms in times.items():
        print(f"  {name:<6} {ms:7.3f} ms/layer  {kv_mb / 1024 / ms * 1e3:6.1f} GiB/s")
    print(f"  cpu is {times['torch'] / times['cpu']:.2f}x torch")


if __name__ == "__main__":
    main()
