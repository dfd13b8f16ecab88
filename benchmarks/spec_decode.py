"""Speculative decoding, one stream: tok/s without it, with n-gram drafts, with a draft model.

    python benchmarks/spec_decode.py [--size smollm2|tiny] [--engines v0 v1] [--k 4]
        [--new-tokens 160] [--repeats 3] [--threads 2] [--methods plain ngram draft]

The workload is one where the answer quotes its prompt: "repeat this text exactly" and
"rename a variable in this code", greedy, one request at a time. Each runner is one
fresh process: the engine without speculation (the baseline), with n-gram drafts, and
with a draft model: for SmolLM2 its own GGUF file kept quantized (``quantization="gguf"``)
drafting for the float32 model converted from it; for the tiny model a one-layer tiny
model trained on the same corpus. Runners take turns per repeat, so a slow spell of the
shared machine falls on all of them. Printed per runner: median tok/s over the repeats
(tokens generated / wall time of each answer), the ratio to the baseline of its engine,
the draft acceptance rate (accepted / proposed, from ``LLM.stats()``), and whether its
greedy tokens equal the baseline's. An engine that refuses speculation (an error when
built) is shown as skipped, with its message.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MARK = "RESULT "
TEXT = (
    "The lighthouse stood on a rock at the edge of the bay. Every night the keeper climbed "
    "the spiral stairs, trimmed the wick and wound the clockwork that turned the lens. Ships "
    "passing in the dark saw its beam sweep across the water once every ten seconds, and "
    "they knew where the reef was."
)
CODE = (
    "def total(items):\n    x = 0\n    for item in items:\n        if item.price > 0:\n"
    "            x += item.price * item.count\n    return x\n\n\n"
    "def average(items):\n    x = total(items)\n    return x / max(len(items), 1)\n"
)
TASKS = [
    f"Repeat this text exactly, word for word:\n\n{TEXT}",
    f"Rename the variable `x` to `amount` in this code. Reply with the whole code only.\n\n{CODE}",
]


def models(size: str) -> tuple[str, str, str | None]:
    """(target path, draft path, draft quantization)."""
    if size == "smollm2":
        from tandem.core.default_model import default_model, gguf_file

        return str(default_model(print)), str(gguf_file(print)), "gguf"
    from tandem.core.named_models import TINY_TRAIN_STEPS
    from tandem.core.testing import make_model

    target = make_model(size="tiny", train_steps=TINY_TRAIN_STEPS)
    draft = make_model(size="tiny", train_steps=TINY_TRAIN_STEPS, num_hidden_layers=1)
    return str(target), str(draft), None


def spec_args(method: str, k: int, draft: str, quant: str | None) -> dict:
    if method == "ngram":
        return {"speculative_config": {"method": "ngram", "num_speculative_tokens": k,
                                       "prompt_lookup_min": 2, "prompt_lookup_max": 4}}  # fmt: skip
    if method == "draft":
        cfg = {"method": "draft", "model": draft, "num_speculative_tokens": k}
        return {"speculative_config": {**cfg, "quantization": quant} if quant else cfg}
    return {}


def child(args: argparse.Namespace) -> None:
    """One runner: build the LLM, warm it up, time ``--repeats`` answers per task."""
    os.environ.setdefault("TANDEM_NUM_THREADS", str(args.threads))
    from tandem.core import LLM, SamplingParams

    target, draft, quant = models(args.size)
    try:
        spec = spec_args(args.method, args.k, draft, quant)
        max_len = 1024 if args.size == "smollm2" else 512
        llm = LLM(model=target, engine=args.engine, max_model_len=max_len, **spec)
    except (ValueError, TypeError, NotImplementedError) as exc:
        print(MARK + json.dumps({"skipped": f"{type(exc).__name__}: {exc}"}), flush=True)
        return
    with llm:
        params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens)
        prompts = [llm.chat_prompts([{"role": "user", "content": t}])[0] for t in TASKS]
        llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)
        before = llm.stats()
        runs, tokens = [], []
        for _ in range(args.repeats):
            for prompt in prompts:
                start = time.perf_counter()
                out = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
                runs.append((len(out.token_ids), time.perf_counter() - start))
                tokens.append(out.token_ids)
        after = llm.stats()
    drafts = after.num_draft_tokens - before.num_draft_tokens
    accepted = after.num_accepted_tokens - before.num_accepted_tokens
    res = {"runs": runs, "tokens": tokens, "drafts": drafts, "accepted": accepted}
    print(MARK + json.dumps(res), flush=True)


def spawn(engine: str, method: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", "--engine", engine, "--method", method]
    for flag in ("size", "k", "new_tokens", "threads"):
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    cmd += ["--repeats", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"skipped": "failed: " + " | ".join(tail)}
    return json.loads(lines[-1][len(MARK) :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="smollm2", choices=("smollm2", "tiny"))
    parser.add_argument("--engines", nargs="+", default=["v0", "v1"], choices=("v0", "v1"))
    parser.add_argument("--methods", nargs="+", default=["plain", "ngram", "draft"],
                        choices=("plain", "ngram", "draft"))  # fmt: skip
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--new-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per runner")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="v0", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="plain", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    methods = ["plain", *[m for m in args.methods if m != "plain"]]
    names = [(e, m) for e in args.engines for m in methods]
    print(f"model={args.size} k={args.k} new={args.new_tokens} threads={args.threads} "
          f"loadavg={os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    got: dict[tuple[str, str], list[dict]] = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names:  # take turns: a slow spell of the machine hits every runner
            got[name].append(spawn(*name, args))
            print(f"  round {r + 1}: {name[0]} {name[1]} done", file=sys.stderr, flush=True)
    print(f"{'engine':<8}{'method':<8}{'tok/s':>8}{'x plain':>9}{'accept':>8}"
          f"{'drafts':>8}{'tokens':>8}{'same as plain':>15}")  # fmt: skip
    for engine in args.engines:
        base = got[(engine, "plain")]
        base_rate = _rate(base)
        for method in methods:
            res = got[(engine, method)]
            skipped = next((x["skipped"] for x in res if "skipped" in x), None)
            if skipped:
                print(f"{engine:<8}{method:<8}  skipped: {skipped[:150]}")
                continue
            rate = _rate(res)
            drafts = sum(x["drafts"] for x in res)
            accepted = sum(x["accepted"] for x in res)
            accept = f"{accepted / drafts:.0%}" if drafts else "-"
            if method != "plain" and not drafts:
                accept = "none"  # the engine took the config but proposed nothing
            same = all(x["tokens"] == b["tokens"] for x, b in zip(res, base) if "tokens" in b)
            ratio = rate / base_rate if base_rate else float("nan")
            made = sum(n for x in res for n, _ in x["runs"])
            print(f"{engine:<8}{method:<8}{rate:8.1f}{ratio:9.2f}{accept:>8}{drafts:>8}"
                  f"{made:>8}{'yes' if same else 'NO':>15}")  # fmt: skip


def _rate(results: list[dict]) -> float:
    """Median over the runs of tokens per second of one answer."""
    rates = [n / t for x in results if "runs" in x for n, t in x["runs"] if t > 0]
    return statistics.median(rates) if rates else 0.0


if __name__ == "__main__":
    main()
