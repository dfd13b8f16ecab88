"""One chat prompt's next-token distribution from the same weights, five ways side by side.

    python benchmarks/gguf_first_logits.py --llama-cpp-venv benchmarks/results/llama-cpp-venv
        [--prompt "What is the capital of France?"] [--top 5]

The shipped SmolLM2 file stores its projections in Q4_1 and its embedding (tied to the
head) in Q8_0; the float32 directory Tandem exports from it holds exactly those weights,
dequantized. A float32 run and a run on the file kept as stored therefore differ only in
how a quantized dot product treats the activations: llama.cpp rounds them to Q8_1 / Q8_0
blocks, Tandem to int8 per 32 values, both before every integer block product. Runners:
transformers and Tandem (v0) on the fp32 directory, Tandem on the file as stored
(``quantization="gguf"``), llama.cpp on an f32 GGUF converted from the directory and on
the shipped file. All of them read the same token ids (the chat template through the
model's tokenizer; llama.cpp's own tokenization of the text is checked to match). The
script prints each runner's top tokens after the prompt and, for every pair, the largest
and the rms difference of their log-probabilities over the whole vocabulary. Two more
runs emulate the activations' rounding in transformers on the float weights (the scale
in fp32, as Tandem keeps it, or in fp16, as llama.cpp does): how far two equally valid
roundings of x already move the distribution.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from llama_cpp_child import (
    OUT_DIR,
    add_child_arguments,
    chat_ids,
    report,
    require_venv,
    smollm2_files,
    spawn,
)


def llama_cpp_scores(gguf: str, text: str, ids: list[int]) -> dict:
    """Runs in the llama.cpp venv: the logits after ``ids`` (fp32 KV cache) and whether
    llama.cpp tokenizes ``text`` to the same ids."""
    from llama_cpp import Llama  # type: ignore[import-not-found]

    llm = Llama(
        model_path=gguf, n_ctx=max(64, len(ids)), logits_all=True, verbose=False, type_k=0, type_v=0
    )
    same = llm.tokenize(text.encode(), add_bos=False, special=True) == ids
    llm.eval(ids)
    return {"logits": [float(v) for v in llm.scores[len(ids) - 1]], "same_tokens": same}


def tandem_logprobs(path: str, ids: list[int], quant: str) -> list[float]:
    """Tandem's log-probabilities of every token after ``ids`` (the first sampling step)."""
    from tandem.core import LLM, SamplingParams

    kwargs = {"quantization": "gguf"} if quant == "gguf" else {"dtype": "float32"}
    with LLM(model=path, engine="v0", max_model_len=max(64, len(ids) + 1), **kwargs) as llm:
        vocab = llm.config.model.vocab_size
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=vocab)
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
    row = [float("nan")] * vocab
    for tok, lp in out.outputs[0].logprobs[0].items():
        row[tok] = lp.logprob
    return row


def child(args: argparse.Namespace) -> None:
    job = json.loads(Path(args.job).read_text())
    if args.child == "llama.cpp":
        report(llama_cpp_scores(args.file, job["text"], job["ids"]))
    else:
        report(tandem_logprobs(args.file, job["ids"], args.child))


def rounded_inputs(model, ids: list[int], half_scale: bool):
    """transformers' log-probabilities with every Linear's input rounded to int8 per 32
    values first (scale amax / 127, kept in fp32 as Tandem keeps it or in fp16 as
    llama.cpp's Q8 blocks keep it): the quantized runs' arithmetic on the float weights."""
    import torch
    import torch.nn.functional as F

    def rounded(x):
        blocks = x.reshape(*x.shape[:-1], -1, 32)
        amax = blocks.abs().amax(-1, keepdim=True)
        inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
        scale = amax / 127.0
        scale = scale.half().float() if half_scale else scale
        return (torch.round(blocks * inv) * scale).reshape(x.shape)

    plain = torch.nn.Linear.forward
    torch.nn.Linear.forward = lambda self, x: F.linear(rounded(x), self.weight, self.bias)
    try:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].double()
    finally:
        torch.nn.Linear.forward = plain
    return torch.log_softmax(logits, -1)


def table(runs: dict, decode, top: int) -> list[str]:
    import torch

    rows = [f"top {top} after the prompt (token logprob):"]
    for name, lp in runs.items():
        best = torch.topk(lp, top)
        pairs = zip(best.indices.tolist(), best.values.tolist())
        rows.append(f"  {name:<16}" + "  ".join(f"{decode([i])!r} {v:.3f}" for i, v in pairs))
    rows.append("log-probability differences over the vocabulary (max |d|, rms):")
    names = list(runs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            d = runs[a] - runs[b]
            d = d[~d.isnan()]
            rms = d.pow(2).mean().sqrt()
            rows.append(f"  {a:>16} vs {b:<16}{d.abs().max():>8.4f}{rms:>8.4f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp-venv", default=None, metavar="DIR")
    parser.add_argument("--prompt", default="What is the capital of France?")
    parser.add_argument("--top", type=int, default=5)
    add_child_arguments(parser, "--job")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    require_venv(parser, args.llama_cpp_venv)
    if not args.prompt.strip():
        parser.error("--prompt must be non-empty text")
    if not 1 <= args.top <= 50:
        parser.error(f"--top must be in [1, 50], got {args.top}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, shipped, files = smollm2_files(args.llama_cpp_venv, ["f32", "q4_1"])
    tok = AutoTokenizer.from_pretrained(str(path))
    text, ids = chat_ids(tok, args.prompt)
    job = OUT_DIR / "first-logits-job.json"
    job.write_text(json.dumps({"text": text, "ids": ids}))
    venv, on_job = args.llama_cpp_venv, ["--job", str(job)]
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        hf = model(torch.tensor([ids])).logits[0, -1].double()
    runs = {"hf f32": torch.log_softmax(hf, -1)}
    runs["hf x-int8 fp32"] = rounded_inputs(model, ids, half_scale=False)
    runs["hf x-int8 fp16"] = rounded_inputs(model, ids, half_scale=True)
    for name, kind, file in (("f32", "f32", path), ("q4_1", "gguf", shipped)):
        got = spawn(__file__, kind, str(file), venv, on_job)
        runs[f"tandem {name}"] = torch.tensor(got, dtype=torch.float64)
    for fmt in ("f32", "q4_1"):
        got = spawn(__file__, "llama.cpp", files[fmt], venv, on_job)
        if not got["same_tokens"]:
            print(f"note: llama.cpp tokenizes the prompt differently ({fmt}); ids are Tandem's")
        logits = torch.tensor(got["logits"], dtype=torch.float64)
        runs[f"llama.cpp {fmt}"] = torch.log_softmax(logits, -1)
    print(f"{len(ids)} prompt tokens: {args.prompt!r} in the chat template")
    print("\n".join(table(runs, tok.decode, args.top)))


if __name__ == "__main__":
    main()
