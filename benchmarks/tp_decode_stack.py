"""Tensor-parallel decode through the one-call C stack against the modules, same run.

    python benchmarks/tp_decode_stack.py [--arch llama] [--size small] [--ranks 2]
        [--steps 64] [--batches 1 8] [--repeats 3]

Starts ``--ranks`` processes (gloo, one thread each); each loads its shard of the
testing model twice, ``decode_stack`` c and modules, prefills ``--batch`` prompts and
times ``--steps`` decode steps, the two runs taking turns ``--repeats`` times (best
counts). Under the C stack each step is one C call per rank that calls the group's
``all_reduce`` back after every o and down projection; under the modules every layer's
ops are Python calls around the same kernels and the same sums. Rank 0 prints tokens/s
of both and their ratio.

Measured on the shared 2-core machine under a load average of 15-18 (other jobs running:
each collective waits for both ranks to be scheduled, so absolute rates are far below a
quiet machine's and vary run to run; the ratio is the result), testing Llama, 2 ranks:

    size   batch   c tok/s   modules tok/s   c/modules
    tiny       1      63.9            39.7       1.61x   (128 steps, best of 5)
    tiny       1     157.0           135.2       1.16x   (128 steps, best of 3, another run)
    tiny       8     935.0           650.1       1.44x
    small      1      17.6            17.0       1.04x   (64 steps, best of 5)
    small      1      14.7            14.8       0.99x   (another run, best of 3)
    small      4      67.4            55.2       1.22x
    small      8     188.6           122.8       1.54x
    small     16     210.3           199.4       1.05x

The stack is never slower beyond noise; its gain is the Python around each layer's ops,
which the collectives' waits (16 sums a step for small's 8 layers) partly hide.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch

PROMPT = 16
BLOCK = 16


def _time(model: object, spec: object, tp: object, batch: int, steps: int) -> float:
    """Seconds of ``steps`` decode steps of ``batch`` sequences after their prompts."""
    from tandem.core.kv.cache import allocate_kv_caches
    from tandem.core.layers.attention_metadata import build_metadata
    from tandem.core.parallel.partition import kv_head_range

    k0, k1 = kv_head_range(spec.num_kv_heads, tp.size, tp.rank)
    per_seq = (PROMPT + steps) // BLOCK + 1
    blocks = batch * per_seq
    caches = allocate_kv_caches(
        spec.num_layers, k1 - k0, spec.head_dim, blocks, BLOCK, torch.float32, "cpu"
    )
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(batch)]
    ids = torch.randint(
        0, spec.vocab_size, (batch * PROMPT,), generator=torch.Generator().manual_seed(0)
    )
    positions = torch.arange(PROMPT).repeat(batch)
    with torch.inference_mode():
        meta = build_metadata([PROMPT] * batch, [PROMPT] * batch, tables, BLOCK)
        model(ids, positions, caches, meta)
        nxt = ids[PROMPT - 1 :: PROMPT]
        tp.barrier()
        start = time.perf_counter()
        for step in range(steps):
            n = PROMPT + step
            meta = build_metadata([1] * batch, [n + 1] * batch, tables, BLOCK)
            hidden = model(nxt, torch.full((batch,), n), caches, meta)
            nxt = model.compute_logits(hidden).argmax(-1)
        tp.barrier()
        return time.perf_counter() - start


def rank_main(args: argparse.Namespace) -> None:
    from tandem.core.engine.loader import load_model
    from tandem.core.layers.kernel_choice import KernelChoice
    from tandem.core.models.plan import make_plan
    from tandem.core.parallel.group import join, leave
    from tandem.core.testing import make_model

    torch.set_num_threads(1)
    tp = join(args.rank, args.ranks, "127.0.0.1", args.port, torch.device("cpu"), 120.0)
    try:
        path = str(make_model(size=args.size, arch=args.arch))
        models = {}
        for stack in ("c", "modules"):
            kernels = KernelChoice(attention="cpu", decode_stack=stack)
            models[stack] = load_model(path, "cpu", torch.float32, tp=tp, kernels=kernels)
        if tp.rank == 0:
            print(f"plan (c): {make_plan(models['c'], 'cpu').line()}")
        spec = models["c"].spec
        for batch in args.batches:
            best = {stack: float("inf") for stack in models}
            _time(models["c"], spec, tp, batch, 4)  # warm-up: tables, packed copies
            _time(models["modules"], spec, tp, batch, 4)
            for _ in range(args.repeats):
                for stack, model in models.items():
                    best[stack] = min(best[stack], _time(model, spec, tp, batch, args.steps))
            if tp.rank == 0:
                rate = {s: batch * args.steps / t for s, t in best.items()}
                print(
                    f"{args.arch} {args.size} tp={args.ranks} batch {batch:>3}: "
                    f"c {rate['c']:8.1f} tok/s  modules {rate['modules']:8.1f} tok/s  "
                    f"c/modules {rate['c'] / rate['modules']:.2f}x",
                    flush=True,
                )
    finally:
        leave(wait_s=60.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--size", default="small")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank >= 0:
        rank_main(args)
        return
    import torch.distributed as dist

    from tandem.core.testing import make_model

    make_model(size=args.size, arch=args.arch)  # made once, here, not by every rank
    store = dist.TCPStore("127.0.0.1", 0, args.ranks, is_master=True, wait_for_workers=False)
    argv = [a for a in sys.argv[1:]]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, *argv, "--rank", str(r), "--port", str(store.port)]
        )
        for r in range(args.ranks)
    ]
    codes = [p.wait() for p in procs]
    del store
    if any(codes):
        raise SystemExit(f"a rank failed: exit codes {codes}")


if __name__ == "__main__":
    main()
