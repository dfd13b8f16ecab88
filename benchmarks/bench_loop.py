"""The pure model loop: forward + argmax over pre-built step tensors, no scheduling.

The step shapes are those of the v1 scheduler on the same workload (one token budget
per step, running sequences first, chunked prefill, then newly admitted prompts), but
every step's input ids, positions and attention metadata are built before the clock
starts, and each sequence owns a contiguous range of cache blocks. What remains is the
model's own cost, the floor an engine's overhead is measured against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from bench_runners import Timing, Workload
from torch import Tensor

from tandem.core.layers.attention_metadata import AttentionMetadata, build_metadata


@dataclass(slots=True)
class Step:
    input_ids: Tensor  # [T] int64
    positions: Tensor  # [T] int64
    meta: AttentionMetadata
    last: Tensor  # [S] int64: rows of the hidden states that sample


def plan(work: Workload, budget: int, max_seqs: int) -> list[list[tuple[int, int, int]]]:
    """Per step, ``(sequence, start, num_tokens)`` in v1's scheduling order."""
    total = [len(p) + work.new_tokens - 1 for p in work.prompts]  # tokens through the model
    known = [len(p) for p in work.prompts]  # prompt, then one more per sampled token
    computed = [0] * len(total)
    waiting = list(range(len(total)))
    running: list[int] = []
    steps = []
    while waiting or running:
        left, step = budget, []
        for s in running:
            n = min(known[s] - computed[s], left)
            if n > 0:
                step.append((s, computed[s], n))
                left -= n
        while waiting and left > 0 and len(running) < max_seqs:
            s = waiting.pop(0)
            n = min(known[s], left)
            running.append(s)
            step.append((s, 0, n))
            left -= n
        for s, start, n in step:
            computed[s] = start + n
            if computed[s] == known[s]:
                known[s] += 1
        running = [s for s in running if computed[s] < total[s]]
        steps.append(step)
    return steps


def build(work: Workload, steps: list[list[tuple[int, int, int]]], block_size: int) -> list[Step]:
    longest = max(len(p) for p in work.prompts) + work.new_tokens
    per_seq = -(-longest // block_size)
    built = []
    for step in steps:
        step = sorted(step, key=lambda x: x[2] == 1 and x[1] > 0)  # prefills, then decodes
        ids, pos, qlens, slens, tables = [], [], [], [], []
        for s, start, n in step:
            prompt = work.prompts[s]
            ids += [prompt[(start + i) % len(prompt)] for i in range(n)]
            pos += range(start, start + n)
            qlens.append(n)
            slens.append(start + n)
            used = -(-(start + n) // block_size)
            tables.append(list(range(s * per_seq, s * per_seq + used)))
        meta = build_metadata(qlens, slens, tables, block_size)
        ends = torch.tensor(qlens).cumsum(0) - 1
        last = [i for i, (s, start, n) in enumerate(step) if start + n >= len(work.prompts[s])]
        built.append(Step(torch.tensor(ids), torch.tensor(pos), meta, ends[last]))
    return built


def run_pure_loop(path: str, work: Workload, threads: int | None, repeats: int) -> Timing:
    from tandem.core.config.engine_args import EngineArgs
    from tandem.core.engine.loader import load_model
    from tandem.core.kv.cache import allocate_kv_caches

    cfg = EngineArgs(model=path, dtype="float32", num_threads=threads).create_config()
    cfg.configure_process()  # the engines' process settings: threads, heap thresholds
    mc, bs = cfg.model, cfg.cache.block_size
    model = load_model(mc, cfg.device, cfg.dtype)
    per_seq = -(-(max(len(p) for p in work.prompts) + work.new_tokens) // bs)
    caches = allocate_kv_caches(
        mc.num_layers, mc.num_kv_heads, mc.head_dim, per_seq * len(work.prompts), bs,
        cfg.dtype, cfg.device,
    )  # fmt: skip
    sched = cfg.scheduler
    steps = build(work, plan(work, sched.max_num_batched_tokens, sched.max_num_seqs), bs)

    @torch.inference_mode()
    def run(todo: list[Step]) -> int:
        count = 0
        for st in todo:
            hidden = model(st.input_ids, st.positions, caches, st.meta)  # [T, C]
            if st.last.numel():
                count += model.compute_logits(hidden[st.last]).argmax(dim=-1).numel()
        return count

    run(steps[:2])  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        produced = run(steps)
        runs.append(time.perf_counter() - start)
        if produced != work.output_tokens:
            raise RuntimeError(
                f"pure loop sampled {produced} tokens, expected {work.output_tokens}"
            )
    return Timing(min(runs), runs=runs)
