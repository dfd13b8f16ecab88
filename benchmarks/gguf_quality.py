"""Greedy agreement with fp32 of the same GGUF files in llama.cpp and in Tandem, side by side.

    python benchmarks/gguf_quality.py --llama-cpp-venv benchmarks/results/llama-cpp-venv
        [--formats f32 q8_0 q4_1 q4_k_m] [--prompts 8] [--new-tokens 48] [--engine v0]

The reference is the fp32 model (SmolLM2-135M-Instruct, the directory made from the
shipped file) in ``transformers``: its greedy answer to each of a few chat prompts. Every
runner then reads prompt + reference answer in one pass (teacher forcing) and we count
the answer positions where its most likely next token is the reference's token. Teacher
forcing keeps one early disagreement from changing every later position, so the figure
is per position, not per answer. llama.cpp runs each file in the venv that
``llama_cpp_venv.sh`` builds (``logits_all``: the scores of every position); Tandem runs
the same file kept as stored (``quantization="gguf"``), its top-1 from
``prompt_logprobs``. A last column counts the positions where the two runners agree
with each other. The files are those of ``single_stream.py`` (``gguf_files.py``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gguf_files import FORMATS
from llama_cpp_child import (
    OUT_DIR,
    add_child_arguments,
    chat_ids,
    report,
    require_venv,
    smollm2_files,
    spawn,
)

PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky is blue to a ten-year-old.",
    "List three ways to save water at home.",
    "What is the difference between a list and a tuple in Python?",
    "Give me a recipe for a simple tomato soup.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
    "How do vaccines train the immune system?",
    "Write a haiku about autumn leaves.",
    "What are the main causes of inflation?",
    "Describe a good morning routine for a student.",
]


def llama_cpp_top1(gguf: str, seqs: list[list[int]]) -> list[list[int]]:
    """Runs in the llama.cpp venv: the argmax token after every prefix of each sequence."""
    import numpy as np
    from llama_cpp import Llama  # type: ignore[import-not-found]

    llm = Llama(model_path=gguf, n_ctx=2048, logits_all=True, verbose=False, n_threads=2)
    out = []
    for seq in seqs:
        llm.reset()
        llm.eval(seq)
        scores = np.asarray(llm.scores[: len(seq)])  # [T, V]
        out.append(scores.argmax(axis=1).tolist())
    return out


def tandem_top1(path: str, seqs: list[list[int]], engine: str, quant: str) -> list[list[int]]:
    """Tandem's top-1 token after every prefix (prompt_logprobs), position 1 on."""
    from tandem.core import LLM, SamplingParams

    kwargs = {"quantization": "gguf"} if quant == "gguf" else {"dtype": "float32"}
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
    with LLM(model=path, engine=engine, num_threads=2, **kwargs) as llm:
        outs = llm.generate([{"prompt_token_ids": s} for s in seqs], params, use_tqdm=False)
    tops = []
    for out in outs:
        row = []
        for entry in out.prompt_logprobs[1:]:  # entry i: the distribution before token i + 1
            row.append(next(t for t, lp in entry.items() if lp.rank == 1))
        row.append(out.outputs[0].token_ids[0])  # after the whole sequence
        tops.append(row)
    return tops


def child(args: argparse.Namespace) -> None:
    seqs = json.loads(Path(args.seqs).read_text())
    if args.child == "llama.cpp":
        report(llama_cpp_top1(args.file, seqs))
    else:
        report(tandem_top1(args.file, seqs, args.engine, args.child))


def reference(path: str, prompts: list[list[int]], new: int) -> list[list[int]]:
    """fp32 transformers' greedy answers (token ids, the prompt excluded)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    answers = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids])
            out = model.generate(x, max_new_tokens=new, do_sample=False, min_new_tokens=new)
            answers.append(out[0, len(ids) :].tolist())
    return answers


def agreement(tops: list[list[int]], prompts: list[list[int]], answers: list[list[int]]) -> float:
    """Share of answer positions whose top-1 is the reference answer's token."""
    hit = total = 0
    for top, prompt, answer in zip(tops, prompts, answers):
        for i, tok in enumerate(answer):  # predicted after prompt + answer[:i]
            hit += top[len(prompt) - 1 + i] == tok
            total += 1
    return hit / max(total, 1)


def mutual(a: list[list[int]], b: list[list[int]], prompts: list[list[int]], new: int) -> float:
    pairs = [
        (x[len(p) - 1 + i], y[len(p) - 1 + i]) for x, y, p in zip(a, b, prompts) for i in range(new)
    ]
    return sum(u == v for u, v in pairs) / max(len(pairs), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp-venv", default=None, metavar="DIR")
    parser.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--engine", default="v0", choices=("v0", "v1"))
    add_child_arguments(parser, "--seqs")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    require_venv(parser, args.llama_cpp_venv)
    if not 1 <= args.prompts <= len(PROMPTS):
        parser.error(f"--prompts must be in [1, {len(PROMPTS)}], got {args.prompts}")
    from transformers import AutoTokenizer

    path, _, files = smollm2_files(args.llama_cpp_venv, list(args.formats))
    tok = AutoTokenizer.from_pretrained(str(path))
    prompts = [chat_ids(tok, p)[1] for p in PROMPTS[: args.prompts]]
    answers = reference(str(path), prompts, args.new_tokens)
    seqs = [p + a for p, a in zip(prompts, answers)]
    seqs_file = OUT_DIR / "quality-seqs.json"
    seqs_file.write_text(json.dumps(seqs))
    n = sum(len(a) for a in answers)
    print(f"{len(prompts)} prompts, {n} answer positions (fp32 transformers' greedy answers)")
    venv, job = args.llama_cpp_venv, ["--seqs", str(seqs_file), "--engine", args.engine]
    fp32 = spawn(__file__, "fp32", str(path), venv, job)
    own = agreement(fp32, prompts, answers)
    print(f"tandem {args.engine} on the fp32 directory vs transformers: {own:.1%}")
    head = f"{'file':<10}{'llama.cpp':>11}{'tandem ' + args.engine:>11}{'same top-1':>12}"
    rows = [head + "   (agreement with fp32's greedy token, teacher-forced)", "-" * len(head)]
    for fmt, file in files.items():
        ours = spawn(__file__, "gguf", file, venv, job)
        theirs = spawn(__file__, "llama.cpp", file, venv, job)
        a, b = agreement(theirs, prompts, answers), agreement(ours, prompts, answers)
        same = mutual(ours, theirs, prompts, args.new_tokens)
        rows.append(f"{fmt:<10}{a:>11.1%}{b:>11.1%}{same:>12.1%}")
        print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
