"""The runners of ``throughput.py``; each one runs in a fresh process of its own.

Every runner takes the model path, the workload and the thread count, and returns a
:class:`Timing`: seconds for the whole workload after a warm-up, and (when it means
something) the start-up seconds from constructing the engine to its first token.

Nothing heavy is imported at module level: a tandem runner's start-up clock starts
before ``tandem.core.llm`` is imported, so it counts every import ``LLM(...)`` pulls
in (torch, transformers, the kernels), as a user's fresh script would see it. The
same engine is then built once more in the warm process (``warm_startup``).
"""

from __future__ import annotations

import importlib.util
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any


@dataclass(slots=True)
class Workload:
    prompts: list[list[int]]
    new_tokens: int

    @property
    def output_tokens(self) -> int:
        return len(self.prompts) * self.new_tokens

    def variant(self, r: int, vocab: int) -> list[list[int]]:
        """The prompts with every id shifted by ``r`` (kept >= 4): the same lengths and
        cost, but no prefix shared with another variant, so a repeat never hits a cache."""
        return [[4 + (t - 4 + r) % (vocab - 4) for t in p] for p in self.prompts]


@dataclass(slots=True)
class Timing:
    seconds: float | None  # None: skipped; else the best of the repeats
    startup: float | None = None  # fresh process: the imports LLM(...) triggers included
    note: str = ""
    warm_startup: float | None = None  # a second LLM(...) in the same process
    runs: list[float] | None = None  # every repeat's seconds


def make_workload(
    num: int, lo: int, hi: int, new_tokens: int, vocab: int, seed: int = 0
) -> Workload:
    """``num`` prompts of lengths drawn from ``[lo, hi]`` with a fixed seed."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(4, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(num)]
    return Workload(prompts, new_tokens)


def run_tandem(
    path: str,
    engine: str,
    work: Workload,
    threads: int | None,
    repeats: int,
    vocab: int,
    quantization: str | None = None,
) -> Timing:
    start = time.perf_counter()
    from tandem.core.llm import LLM
    from tandem.core.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=work.new_tokens, ignore_eos=True)
    first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    kwargs: dict[str, Any] = {"engine": engine, "dtype": "float32", "num_threads": threads}
    if quantization is not None:
        kwargs["quantization"] = quantization
    with LLM(model=path, **kwargs) as llm:
        llm.generate([{"prompt_token_ids": work.prompts[0]}], first, use_tqdm=False)
        startup = time.perf_counter() - start
        llm.generate([{"prompt_token_ids": work.prompts[0]}], params, use_tqdm=False)  # warm-up
        runs = []
        for r in range(repeats):
            prompts = [{"prompt_token_ids": p} for p in work.variant(r + 1, vocab)]
            start = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=False)
            runs.append(time.perf_counter() - start)
            produced = sum(len(o.outputs[0].token_ids) for o in outs)
            if produced != work.output_tokens:
                raise RuntimeError(
                    f"{engine} produced {produced} tokens, expected {work.output_tokens}"
                )
    start = time.perf_counter()
    with LLM(model=path, **kwargs) as llm:
        llm.generate([{"prompt_token_ids": work.prompts[0]}], first, use_tqdm=False)
        warm = time.perf_counter() - start
    return Timing(min(runs), startup, warm_startup=warm, runs=runs)


def run_hf(path: str, work: Workload, batch: int, threads: int | None, repeats: int) -> Timing:
    """transformers ``generate`` (sdpa, fp32) in static batches, left-padded."""
    import torch
    from transformers import AutoModelForCausalLM

    if threads is not None:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    pad = model.generation_config.pad_token_id or 0

    def generate(prompts: list[list[int]], new: int) -> None:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                do_sample=False,
                pad_token_id=pad,
                max_new_tokens=new,
                min_new_tokens=new,
            )
        if out.shape[1] - width != new:
            raise RuntimeError("transformers stopped early")

    generate(work.prompts[:1], 1)
    startup = time.perf_counter() - start
    generate(work.prompts[:1], work.new_tokens)  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(0, len(work.prompts), batch):
            generate(work.prompts[i : i + batch], work.new_tokens)
        runs.append(time.perf_counter() - start)
    return Timing(min(runs), startup, runs=runs)


def run_vllm(path: str, work: Workload, threads: int | None, repeats: int, vocab: int) -> Timing:
    """vLLM's CPU build as an outside baseline, only where it is installed."""
    if importlib.util.find_spec("vllm") is None:
        return Timing(None, note="skipped: not installed")
    from vllm import LLM, SamplingParams  # type: ignore[import-not-found]

    params = SamplingParams(temperature=0.0, max_tokens=work.new_tokens, ignore_eos=True)
    start = time.perf_counter()
    # on the CPU backend gpu_memory_utilization is the share of RAM vLLM reserves: 0.3
    # leaves it 2-3 GB of KV cache here (tandem's default cache is at most 1 GiB)
    llm = LLM(
        model=path,
        dtype="float32",
        enable_prefix_caching=False,
        max_model_len=2048,
        gpu_memory_utilization=0.3,
    )
    first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    llm.generate([{"prompt_token_ids": work.prompts[0]}], first, use_tqdm=False)
    startup = time.perf_counter() - start
    runs = []
    for r in range(repeats):
        prompts = [{"prompt_token_ids": p} for p in work.variant(r + 1, vocab)]
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        runs.append(time.perf_counter() - start)
    return Timing(min(runs), startup, runs=runs)


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
    c, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    h, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or c // h
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    per_token = layers * (c * (h + 2 * kvh) * d + h * d * c + 3 * c * inter)
    flops = 0.0
    for p in work.prompts:
        t = len(p) + work.new_tokens - 1  # tokens through the layers
        flops += 2 * per_token * t
        flops += layers * 4 * h * d * t * (t + 1) / 2  # q.k and p.v over causal context
    flops += 2 * c * vocab * work.output_tokens
    return flops


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
