"""The runners of ``throughput.py``; each one runs in a fresh process of its own.

Every runner takes the model path, the workload and the thread count, and returns a
:class:`Timing`: seconds for the whole workload after a warm-up, and (when it means
something) the start-up seconds from constructing the engine to its first token.

Nothing heavy is imported at module level: a tandem runner's start-up clock starts
before ``tandem.core.entrypoints.llm`` is imported, so it counts every import ``LLM(...)`` pulls
in (torch, transformers, the kernels), as a user's fresh script would see it. The
same engine is then built once more in the warm process (``warm_startup``).

The clocks other benchmarks time a generate with live here too: :func:`time_generate`
(one ``generate`` by wall or CPU clock, its token count checked) and :func:`cpu_seconds`.
"""

from __future__ import annotations

import importlib.util
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
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


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and its live children (v1's processes):
    unlike wall time, barely moved by other programs on a busy machine."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def time_generate(
    llm: Any,
    prompts: Any,
    params: Any,
    expect: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds by ``clock`` of one ``llm.generate``; with ``expect``, the output tokens it
    must have produced in all (a run cut short would look fast)."""
    start = clock()
    outs = llm.generate(prompts, params, use_tqdm=False)
    took = clock() - start
    if expect is not None:
        made = sum(len(o.outputs[0].token_ids) for o in outs)
        if made != expect:
            raise RuntimeError(f"expected {expect} tokens, got {made}")
    return took


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
    from tandem.core.entrypoints.llm import LLM
    from tandem.core.inputs.sampling_params import SamplingParams

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
            runs.append(time_generate(llm, prompts, params, work.output_tokens))
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
        runs.append(time_generate(llm, prompts, params))
    return Timing(min(runs), startup, runs=runs)
