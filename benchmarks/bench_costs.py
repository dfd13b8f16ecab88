"""What a workload costs and what this machine can do: the yardsticks ``throughput.py``
and ``single_stream.py`` set their timings against (FLOPs, bytes, GEMM rate, bandwidth)."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from bench_runners import Workload


def gemm_rates(threads: int | None, seconds: float = 2.0) -> dict[str, float]:
    """Best fp32 GEMM rate (FLOP/s) on the model's MLP-like shapes, per GEMM library.

    MKL through ``torch.mm`` and oneDNN with a packed weight (what tandem's linear
    layers run): the machine's limit is the faster of the two.
    """
    import torch

    from tandem.kernels.ops.linear import linear, pack_weight

    if threads is not None:
        torch.set_num_threads(threads)
    rates = {"torch.mm": 0.0, "onednn": 0.0}
    for m, k, n in ((1024, 512, 3072), (1024, 1536, 512), (256, 512, 3072)):
        a, w = torch.randn(m, k), torch.randn(n, k)
        packed = pack_weight(w)
        calls = {"torch.mm": partial(torch.mm, a, w.t().contiguous(), out=torch.empty(m, n))}
        if packed is not None:
            calls["onednn"] = partial(linear, a, w, None, packed)
        for name, call in calls.items():
            rates[name] = max(rates[name], 2 * m * k * n * _calls_per_second(call, seconds / 6))
    return rates


def _calls_per_second(call: Callable[[], object], seconds: float) -> float:
    for _ in range(3):
        call()
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        reps += 1
    return reps / (time.perf_counter() - start)


def workload_flops(cfg: dict[str, int], work: Workload) -> float:
    """Matrix FLOPs of the workload: linear layers, causal attention and the logits.

    Every prompt token and every output token but the last runs through the layers;
    the logits are computed once per output token.
    """
    costs = phase_costs(cfg, work)
    return costs["gemm_flops"] + costs["attention_flops"]


def phase_costs(cfg: dict[str, int], work: Workload, bytes_per_value: int = 4) -> dict[str, float]:
    """The workload split by what bounds each part: FLOPs of the linear layers and the
    logits (a GEMM), FLOPs of attention, and bytes of K/V the decode steps read back.

    Decoding one token reads the K and V of every earlier position of its sequence in
    every layer: ``2 * layers * kv_heads * head_dim`` values per earlier position.
    """
    c, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    h, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or c // h
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    per_token = layers * (c * (h + 2 * kvh) * d + h * d * c + 3 * c * inter)
    gemm = attention = kv_bytes = 0.0
    for p in work.prompts:
        t = len(p) + work.new_tokens - 1
        gemm += 2 * per_token * t
        attention += layers * 4 * h * d * t * (t + 1) / 2
        # decode steps: step i reads the K/V of len(p) + i positions
        positions = sum(len(p) + i for i in range(work.new_tokens - 1))
        kv_bytes += 2 * layers * kvh * d * positions * bytes_per_value
    gemm += 2 * c * vocab * work.output_tokens
    return {"gemm_flops": gemm, "attention_flops": attention, "kv_read_bytes": kv_bytes}


def memory_bandwidth(threads: int | None, size_mb: int = 256, seconds: float = 1.0) -> float:
    """Bytes/s this machine reads with torch: the best of repeated sums over a large tensor."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    x = torch.ones(size_mb * (1 << 20) // 4)
    best = float("inf")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - start)
    return x.numel() * 4 / best
