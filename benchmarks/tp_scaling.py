"""Tensor parallel on the CPU: TP=2 (1 thread per rank) against TP=1 (2 threads), and a
scaling model that says from which model size tensor parallelism pays.

    python benchmarks/tp_scaling.py [--size small] [--new 64] [--batches 1 16] [--repeats 2]

Same run, same machine: engine v1 generates ``--new`` greedy tokens (EOS ignored) for
each batch size, once with ``tensor_parallel_size=1, num_threads=2`` and once with
``tensor_parallel_size=2, num_threads=1`` (one thread per rank, so both use two cores);
a run's best of ``--repeats`` counts (after one warm-up). Two processes then time gloo's
``all_reduce`` of one step's activations ([rows, hidden] float32, 1 thread each), which
gives the all-reduce cost per token: two all-reduces per layer (after the attention's
output projection and after the MLP's down projection) times the layers, per row.

The scaling model (printed at the end, with the all-reduce latency measured here):

Per layer and per token, a Llama-shaped layer (hidden h, MLP width ~2.7h, GQA) holds
about 11 h^2 weights; decoding reads all of them once per step, so at batch sizes where
decode is bound by memory, one rank's layer time is ``W / B`` (W the layer's weight
bytes, B the memory bandwidth a rank has). With p ranks each reads W/p, saving
``(1 - 1/p) W / B`` per layer *if* the ranks have their own bandwidth (their own
socket, their own GPU). The price is two all-reduces of h values per token per layer:
``2 (a + 2 (p-1)/p * h s / b)`` with a the latency of one collective, b its bus
bandwidth and s the bytes per value. TP pays once the saving beats the price; the bytes
term is tiny at decode sizes, so the latency a decides, and the break-even hidden size is
about ``h* = sqrt(2 a B / ((1 - 1/p) * 11 s))``:

* CPU, two ranks on **one** socket (this benchmark): the ranks share the socket's
  bandwidth and cores, so the model predicts no saving and every all-reduce as pure
  cost. On an idle machine TP=2 should then trail TP=1 by the all-reduce time per
  token. On a busy, oversubscribed one (like the 2-core machine of the numbers below) it
  can lead instead: two OpenMP threads of one process wait for each other whenever
  another process takes one of the cores, while single-threaded ranks do not; that is a
  scheduling effect, not a gain TP makes on a quiet machine.
* CPU, one rank per socket (two-socket server, ~100 GB/s per socket, gloo over
  loopback, a ~ the latency measured here): h* ~ 0.5-1k, i.e. from ~0.5B-parameter
  models, and the gain grows with h^2 while the all-reduce stays fixed; a NUMA-unaware
  TP=1 across both sockets reads half its weights from the far socket instead.
* GPUs over NVLink (NCCL, a ~ 10 us, 3.35 TB/s HBM, bf16): h* ~ 2.5k (from ~3B
  models, batch 1); over PCIe (a ~ 30 us): h* ~ 4k. At large batches decode turns
  compute-bound and the all-reduce bytes (rows x h) start to count, while the FLOPs
  saved grow with the batch as well, so the break-even moves little.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYER_WEIGHTS_PER_H2 = 11.0  # q,o (2h^2) + k,v (GQA, ~1h^2) + gate/up/down (3 x 2.7h^2)
GPU_PRESETS = (  # (name, collective latency s, memory bandwidth B/s, bytes per value)
    ("GPU NVLink (NCCL), bf16", 10e-6, 3.35e12, 2),
    ("GPU PCIe (NCCL), bf16", 30e-6, 3.35e12, 2),
)
CPU_SOCKET_BW = 100e9  # one socket's memory bandwidth, B/s (a typical server socket)


def decode_rate(model: str, tp: int, threads: int, batch: int, new: int, repeats: int) -> float:
    """Output tokens per second of engine v1 on ``batch`` prompts, ``new`` tokens each."""
    from tandem.core import LLM, SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    kw = {"tensor_parallel_size": tp, "num_threads": threads, "max_num_seqs": max(batch, 1)}
    best = math.inf
    with LLM(model, engine="v1", max_model_len=512, **kw) as llm:
        for run in range(repeats + 1):  # the first run warms up
            prompts = [{"prompt_token_ids": [7 + run, 8 + i, 9, 10]} for i in range(batch)]
            start = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            if run:
                best = min(best, time.perf_counter() - start)
    return batch * new / best


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _allreduce_rank(rank: int, port: int, shapes: list[tuple[int, int]], n: int, q: object) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        for shape in shapes:
            x = torch.ones(shape)
            for _ in range(20):
                dist.all_reduce(x)
            times = []
            for _ in range(n):
                start = time.perf_counter()
                dist.all_reduce(x)
                times.append(time.perf_counter() - start)
            if rank == 0:
                q.put((shape, statistics.median(times)))  # type: ignore[attr-defined]
    finally:
        dist.destroy_process_group()


def allreduce_seconds(shapes: list[tuple[int, int]], n: int = 400) -> dict[tuple[int, int], float]:
    """Median seconds of one gloo all_reduce of each float32 shape between two processes."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_allreduce_rank, args=(r, port, shapes, n, q)) for r in (0, 1)]
    for p in procs:
        p.start()
    out = dict(q.get(timeout=300) for _ in shapes)
    for p in procs:
        p.join(timeout=60)
    return out


def breakeven_hidden(latency: float, bandwidth: float, value_bytes: int, p: int = 2) -> float:
    """The hidden size from which p ranks with their own bandwidth decode faster."""
    return math.sqrt(2 * latency * bandwidth / ((1 - 1 / p) * LAYER_WEIGHTS_PER_H2 * value_bytes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", choices=("tiny", "small"))
    ap.add_argument("--new", type=int, default=64, help="new tokens per request")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from tandem.core.testing import MODEL_SIZES, make_model

    model = str(make_model(size=args.size, arch="llama"))
    cfg = MODEL_SIZES[args.size]
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    print(f"model: llama {args.size} (hidden {hidden}, {layers} layers), cores {os.cpu_count()}")
    cost = allreduce_seconds([(b, hidden) for b in args.batches])
    print(f"{'batch':>5} {'TP=1 x2 thr tok/s':>18} {'TP=2 x1 thr tok/s':>18} {'TP2/TP1':>8} "
          f"{'all_reduce us':>14} {'all-reduce us/token':>20}")  # fmt: skip
    for batch in args.batches:
        one = decode_rate(model, 1, 2, batch, args.new, args.repeats)
        two = decode_rate(model, 2, 1, batch, args.new, args.repeats)
        ar = cost[(batch, hidden)]
        per_token = 2 * layers * ar / batch
        print(f"{batch:>5} {one:>18.1f} {two:>18.1f} {two / one:>8.2f} {ar * 1e6:>14.1f} "
              f"{per_token * 1e6:>20.1f}")  # fmt: skip
    alpha = cost[(min(args.batches), hidden)]
    print("\nscaling model: break-even hidden size for TP=2 at decode (see the docstring)")
    rows = [
        ("CPU, one rank per socket (gloo, a measured)", alpha, CPU_SOCKET_BW, 4),
        ("CPU, one rank per socket (gloo, a ~ 40 us idle)", 40e-6, CPU_SOCKET_BW, 4),
    ]
    for name, lat, bw, s in [*rows, *GPU_PRESETS]:
        h = breakeven_hidden(lat, bw, s)
        params = 12 * h * h * 32  # ~12 h^2 per layer, 32 layers: the model size it means
        print(f"  {name:<46} a={lat * 1e6:6.1f} us  h* ~ {h:6.0f}  (~{params / 1e9:.2f}B params)")
    print("  CPU, both ranks on one socket: never (bandwidth shared, all-reduce pure cost)")


if __name__ == "__main__":
    main()
