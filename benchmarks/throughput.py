"""Offline throughput: tandem engines vs transformers ``generate``, in the same run.

    python benchmarks/throughput.py [--engines v0 v1] [--quick] [--size small]

The fixed workload: 64 requests whose prompt lengths are drawn from 16..256 (seed 0),
128 new tokens each, greedy, EOS ignored, prompts given as token ids. transformers runs
it one request at a time and in static batches of 16 (left-padded). Prints output
tokens/s for every runner and each engine's ratio to both transformers baselines.
``--quick`` shrinks the workload (16 requests, prompts 16..64, 32 new tokens).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tandem.core.testing import make_model


@dataclass(slots=True)
class Workload:
    prompts: list[list[int]]
    new_tokens: int

    @property
    def output_tokens(self) -> int:
        return len(self.prompts) * self.new_tokens


def make_workload(
    num: int, lo: int, hi: int, new_tokens: int, vocab: int, seed: int = 0
) -> Workload:
    rng = random.Random(seed)
    prompts = [[rng.randrange(4, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(num)]
    return Workload(prompts, new_tokens)


def run_tandem(path: str, engine: str, work: Workload) -> float:
    from tandem.core.llm import LLM
    from tandem.core.sampling_params import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=work.new_tokens, ignore_eos=True)
    with LLM(model=path, engine=engine, dtype="float32") as llm:
        llm.generate([{"prompt_token_ids": work.prompts[0]}], params, use_tqdm=False)  # warm-up
        start = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in work.prompts], params, use_tqdm=False)
        elapsed = time.perf_counter() - start
    produced = sum(len(o.outputs[0].token_ids) for o in outs)
    if produced != work.output_tokens:
        raise RuntimeError(f"{engine} produced {produced} tokens, expected {work.output_tokens}")
    return elapsed


def run_hf(path: str, work: Workload, batch: int) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    pad = model.generation_config.pad_token_id or 0

    def generate(prompts: list[list[int]]) -> None:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                do_sample=False,
                pad_token_id=pad,
                max_new_tokens=work.new_tokens,
                min_new_tokens=work.new_tokens,
            )
        if out.shape[1] - width != work.new_tokens:
            raise RuntimeError("transformers stopped early")

    generate(work.prompts[:1])  # warm-up
    start = time.perf_counter()
    for i in range(0, len(work.prompts), batch):
        generate(work.prompts[i : i + batch])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["v0"], choices=("v0", "v1"))
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--quick", action="store_true", help="a smaller workload")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    path = str(make_model(size=args.size))
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(path).vocab_size
    work = (
        make_workload(16, 16, 64, 32, vocab)
        if args.quick
        else make_workload(64, 16, 256, 128, vocab)
    )
    print(
        f"model={args.size} requests={len(work.prompts)} new_tokens={work.new_tokens} "
        f"prompt_tokens={sum(map(len, work.prompts))} threads={torch.get_num_threads()}"
    )
    runners: dict[str, Callable[[], float]] = {
        f"tandem {e}": (lambda e=e: run_tandem(path, e, work)) for e in args.engines
    }
    runners["transformers 1-at-a-time"] = lambda: run_hf(path, work, 1)
    runners["transformers batch-16"] = lambda: run_hf(path, work, 16)
    rates: dict[str, float] = {}
    for name, fn in runners.items():
        seconds = fn()
        rates[name] = work.output_tokens / seconds
        print(f"{name:<26} {seconds:8.2f} s  {rates[name]:9.1f} output tok/s")
    for e in args.engines:
        mine = rates[f"tandem {e}"]
        print(
            f"tandem {e}: {mine / rates['transformers 1-at-a-time']:.2f}x vs one at a time, "
            f"{mine / rates['transformers batch-16']:.2f}x vs static batches of 16"
        )


if __name__ == "__main__":
    main()
