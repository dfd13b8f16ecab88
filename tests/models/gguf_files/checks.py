"""What ``make.py`` records about each GGUF file: llama.cpp and transformers against the source.

The reference is the source checkpoint under transformers (float32): its tokenizer's ids for
sample texts, and for a few prompts the last position's logits and 8 greedy tokens. llama.cpp
(``llama_tools.py run``, n_ctx 64) and transformers' GGUF loader
(``from_pretrained(dir, gguf_file=name)``) are each compared with it. Greedy tokens of a
quantized file may differ from the float32 reference; its logit distance says by how much.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

NEW_TOKENS = 8
PROMPT_TOKENS = 12
PROMPTS = (
    "The cat reads a long letter before noon.",
    "Why does the river follow the map of the city?",
    "Le café est très chaud, n'est-ce pas ?",
)
EDGE_TEXTS = (
    "Hello world",
    " leading space",
    "two  spaces and\n\nnewlines\ttab",
    "digits 1234567 and 3.14",
    "emoji 🙂🚀 and ❤️",
    "日本語と한국어",
    "I've said 'RE' you're fine",
    "",
)


def check_file(venv: Path, tools: Path, gguf: Path, hf_dir: Path, work: Path) -> dict[str, Any]:
    ref = reference(str(hf_dir))
    llama = _llama_cpp(venv, tools, gguf, ref, work)
    hf = _transformers(gguf, ref)
    summary = {
        "llama_cpp_loads": llama["loads"],
        "llama_cpp_tokens_equal": llama.get("tokenizer_equal"),
        "llama_cpp_greedy_equal": llama.get("greedy_equal"),
        "llama_cpp_max_logit_diff": llama.get("max_abs_logit_diff"),
        "transformers_loads": hf["loads"],
        "transformers_greedy_equal": hf.get("greedy_equal"),
    }
    reference_notes = {"auto_tokenizer_equals_tokenizer_json": ref["auto_tokenizer_equal"]}
    return {
        "summary": summary,
        "llama_cpp": llama,
        "transformers": hf,
        "reference": reference_notes,
    }


def texts() -> list[str]:
    from tandem.core.testing.tokenizer import corpus

    return [*corpus()[:40], *EDGE_TEXTS]


@cache
def reference(hf_dir: str) -> dict[str, Any]:
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # tokenizer.json itself: AutoTokenizer swaps in Qwen2Tokenizer (digits split one by one)
    # for a qwen2 config whatever tokenizer_config.json says
    tok = Tokenizer.from_file(str(Path(hf_dir) / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    prompts = [tok.encode(p).ids[:PROMPT_TOKENS] for p in PROMPTS]
    auto = AutoTokenizer.from_pretrained(hf_dir)
    return {
        "auto_tokenizer_equal": [auto(t).input_ids for t in texts()]
        == [tok.encode(t).ids for t in texts()],
        "tokens": [tok.encode(t).ids for t in texts()],
        "prompts": prompts,
        "runs": [_run(model, p) for p in prompts],
    }


def _run(model: Any, prompt: list[int]) -> dict[str, Any]:
    import torch

    ids = list(prompt)
    greedy: list[int] = []
    with torch.no_grad():
        last = model(torch.tensor([ids])).logits[0, -1].double()
        logits = last
        for _ in range(NEW_TOKENS):  # plain argmax, no end-of-sequence handling (as llama.cpp's)
            greedy.append(int(logits.argmax()))
            logits = model(torch.tensor([ids + greedy])).logits[0, -1]
    return {"last_logits": last.tolist(), "greedy": greedy}


def _compare(runs: list[dict[str, Any]], ref: dict[str, Any]) -> dict[str, Any]:
    diffs = []
    for got, want in zip(runs, ref["runs"], strict=True):
        n = min(len(got["last_logits"]), len(want["last_logits"]))
        pairs = zip(got["last_logits"][:n], want["last_logits"][:n], strict=True)
        diffs.append(max(abs(a - b) for a, b in pairs))
    greedy = [got["greedy"] == want["greedy"] for got, want in zip(runs, ref["runs"], strict=True)]
    return {
        "greedy_equal": all(greedy),
        "greedy_equal_per_prompt": greedy,
        "greedy": [r["greedy"] for r in runs],
        "reference_greedy": [r["greedy"] for r in ref["runs"]],
        "max_abs_logit_diff": round(max(diffs), 6),
    }


def _llama_cpp(venv: Path, tools: Path, gguf: Path, ref: dict[str, Any], work: Path) -> dict:
    request = work / "request.json"
    request.write_text(
        json.dumps({"texts": texts(), "prompts": ref["prompts"], "new_tokens": NEW_TOKENS}),
        encoding="utf-8",
    )
    cmd = [str(venv / "bin" / "python"), str(tools), "run", str(gguf), str(request)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        return {"loads": False, "error": done.stderr.strip().splitlines()[-6:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    wrong = [
        {"text": text, "llama_cpp": got, "reference": want}
        for text, got, want in zip(texts(), out["tokens"], ref["tokens"], strict=True)
        if got != want
    ]
    return {
        "loads": True,
        "tokenizer_equal": not wrong,
        "tokenizer_mismatches": wrong,
        **_compare(out["prompts"], ref),
    }


def _transformers(gguf: Path, ref: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        ).eval()
    except Exception as exc:  # any refusal is the finding
        return {"loads": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    found: dict[str, Any] = {"loads": True, "class": type(model).__name__}
    found.update(_compare([_run(model, p) for p in ref["prompts"]], ref))
    del found["reference_greedy"]  # the same as the llama_cpp entry's
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        found["tokenizer_equal"] = [tok(t).input_ids for t in texts()] == ref["tokens"]
        found["tokenizer_class"] = type(tok).__name__
    except Exception as exc:
        found["tokenizer_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return found
