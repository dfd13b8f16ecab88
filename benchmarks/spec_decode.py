"""Speculative decoding, one stream: tok/s without it, with n-gram drafts, with a draft model.

    python benchmarks/spec_decode.py [--size smollm2|tiny] [--engines v0 v1] [--k 4]
        [--new-tokens 160] [--repeats 2] [--threads 2] [--methods plain ngram draft]

The workload is one where the answer quotes its prompt: "repeat this text exactly" and
"rename a variable in this code", greedy, one request at a time. Per engine, one fresh
process holds an LLM per method: without speculation (the baseline), with n-gram drafts,
and with a draft model: for SmolLM2 its own GGUF file kept quantized
(``quantization="gguf"``) drafting for the float32 model converted from it; for the tiny
model (which follows no instruction: it is given each text twice and runs to
``--new-tokens``) a one-layer tiny model trained on the same corpus. The methods take turns answer
by answer, so a slow spell of the shared machine falls on all of them. Printed per
method: tok/s over all its answers (tokens generated / wall time), the ratio to the
baseline of its engine, the draft acceptance rate (accepted / proposed, from
``LLM.stats()``), and whether its greedy tokens equal the baseline's. An engine that
refuses speculation (an error when built) is shown as skipped, with its message; one
that takes the config but proposes nothing shows acceptance "none".
"""

from __future__ import annotations

import argparse
import json
import os
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
        from tandem.core.catalog.default_model import gguf_file
        from tandem.core.gguf.export import exported

        return str(exported(gguf_file(print))), str(gguf_file(print)), "gguf"
    from tandem.core.catalog.named_models import TINY_TRAIN_STEPS
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
    """One engine: an LLM per method in this process, answers interleaved across them."""
    os.environ.setdefault("TANDEM_NUM_THREADS", str(args.threads))
    from tandem.core import LLM, SamplingParams

    target, draft, quant = models(args.size)
    max_len = 1024 if args.size == "smollm2" else 512
    llms, res = {}, {}
    for method in args.methods:
        try:
            spec = spec_args(method, args.k, draft, quant)
            llms[method] = LLM(model=target, engine=args.engine, max_model_len=max_len, **spec)
        except (ValueError, TypeError, NotImplementedError) as exc:
            res[method] = {"skipped": f"{type(exc).__name__}: {exc}"}
    # the tiny model follows no instruction: it gets the texts twice, as plain text
    tiny = args.size == "tiny"
    params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=tiny)
    warm = SamplingParams(temperature=0.0, max_tokens=8)
    first = next(iter(llms.values()))
    prompts = [first.chat_prompts([{"role": "user", "content": t}])[0] for t in TASKS]
    if tiny:
        prompts = [f"{TEXT} {TEXT}", f"{CODE}\n{CODE}"]
    for method, llm in llms.items():
        llm.generate(prompts[:1], warm, use_tqdm=False)
        res[method] = {"runs": [], "tokens": [], "before": llm.stats()}
    for _ in range(args.repeats):
        for prompt in prompts:
            for method, llm in llms.items():  # take turns: a slow spell hits every one
                start = time.perf_counter()
                out = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
                res[method]["runs"].append((len(out.token_ids), time.perf_counter() - start))
                res[method]["tokens"].append(out.token_ids)
    for method, llm in llms.items():
        before, after = res[method].pop("before"), llm.stats()
        res[method]["drafts"] = after.num_draft_tokens - before.num_draft_tokens
        res[method]["accepted"] = after.num_accepted_tokens - before.num_accepted_tokens
        llm.shutdown()
    print(MARK + json.dumps(res), flush=True)


def spawn(engine: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", "--engine", engine, "--methods", *args.methods]
    for flag in ("size", "k", "new_tokens", "threads", "repeats"):
        cmd += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {m: {"skipped": "failed: " + " | ".join(tail)} for m in args.methods}
    return json.loads(lines[-1][len(MARK) :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="smollm2", choices=("smollm2", "tiny"))
    parser.add_argument("--engines", nargs="+", default=["v0", "v1"], choices=("v0", "v1"))
    parser.add_argument("--methods", nargs="+", default=["plain", "ngram", "draft"],
                        choices=("plain", "ngram", "draft"))  # fmt: skip
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--new-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=2, help="answers per task and runner")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="v0", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    args.methods = ["plain", *[m for m in args.methods if m != "plain"]]
    print(f"model={args.size} k={args.k} new={args.new_tokens} threads={args.threads} "
          f"repeats={args.repeats} loadavg={os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    print(f"{'engine':<8}{'method':<8}{'tok/s':>8}{'x plain':>9}{'accept':>8}"
          f"{'drafts':>8}{'tokens':>8}{'same as plain':>15}")  # fmt: skip
    for engine in args.engines:
        got = spawn(engine, args)
        base = got["plain"]
        base_rate = _rate(base)
        for method in args.methods:
            res = got[method]
            if "skipped" in res:
                print(f"{engine:<8}{method:<8}  skipped: {res['skipped'][:150]}", flush=True)
                continue
            rate, drafts, accepted = _rate(res), res["drafts"], res["accepted"]
            accept = f"{accepted / drafts:.0%}" if drafts else "-"
            if method != "plain" and not drafts:
                accept = "none"  # the engine took the config but proposed nothing
            same = "tokens" in base and res["tokens"] == base["tokens"]
            ratio = rate / base_rate if base_rate else float("nan")
            made = sum(n for n, _ in res["runs"])
            print(f"{engine:<8}{method:<8}{rate:8.1f}{ratio:9.2f}{accept:>8}{drafts:>8}"
                  f"{made:>8}{'yes' if same else 'NO':>15}", flush=True)  # fmt: skip


def _rate(res: dict) -> float:
    """Tokens per second over all of a runner's answers (generated tokens / their time)."""
    runs = res.get("runs") or []
    total = sum(t for _, t in runs)
    return sum(n for n, _ in runs) / total if total else 0.0


if __name__ == "__main__":
    main()
