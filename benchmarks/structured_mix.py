"""Structured outputs beside free decoding: decode tokens/s of a batch where half the
requests are constrained by a JSON schema, against the same batch all free.

    python benchmarks/structured_mix.py [--model tiny|smollm2|DIR] [--engines v0 v1]
                                        [--batch 16] [--tokens 64] [--repeats 3]
                                        [--clock wall|cpu]

Every request samples at temperature 1 with EOS ignored and runs ``--tokens`` tokens
(the schema, a list of 400 booleans, is longer than that), so each batch does the same
number of steps. Each batch runs once to warm up (the schema is compiled then), then
the three batches take turns ``--repeats`` times; the best time of each counts. Prints
tokens/s for all-free, mixed and all-constrained batches and the ratios to all-free
(goal: mixed >= 0.9x); writes ``benchmarks/results/structured-mix.json``. ``--clock cpu``
counts the CPU seconds of this process and its children (engine v1's core) instead of
wall time: on a machine shared with other work that figure barely moves with the load.
Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench_runners import cpu_seconds, time_generate

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = {"type": "array", "items": {"type": "boolean"}, "minItems": 400, "maxItems": 400}


def params(constrained: bool, seed: int, tokens: int) -> Any:
    from tandem.core import SamplingParams
    from tandem.core.structured import StructuredOutputsParams

    so = StructuredOutputsParams(json=SCHEMA) if constrained else None
    return SamplingParams(
        temperature=1.0, seed=seed, max_tokens=tokens, ignore_eos=True, structured_outputs=so
    )


CLOCKS = {"wall": time.perf_counter, "cpu": cpu_seconds}
CLOCK = CLOCKS["wall"]


def once(llm: Any, kinds: list[bool], tokens: int) -> float:
    """Seconds for one batch of ``kinds`` (True: constrained)."""
    prompts = ["Write a list of booleans:"] * len(kinds)
    batch = [params(c, i, tokens) for i, c in enumerate(kinds)]
    return time_generate(llm, prompts, batch, tokens * len(kinds), CLOCK)


def rates(llm: Any, shapes: dict[str, list[bool]], tokens: int, repeats: int) -> dict:
    """Best tokens/s of each shape; the shapes take turns, so a machine that slows down
    for a while slows them all."""
    for kinds in shapes.values():
        once(llm, kinds, tokens)  # warm-up: the schema is compiled here
    best = {name: float("inf") for name in shapes}
    for _ in range(repeats):
        for name, kinds in shapes.items():
            best[name] = min(best[name], once(llm, kinds, tokens))
    return {name: tokens * len(shapes[name]) / t for name, t in best.items()}


def grammar_ms(model: str, rows: int, batch: int, steps: int = 48, repeats: int = 5) -> float:
    """Milliseconds per step of the grammar work alone (mask filled for ``rows`` of a
    ``batch``, applied to the logits, token accepted), best of ``repeats``: a figure the
    load of a shared machine barely moves."""
    import torch

    from tandem.core.config.engine_args import load_model_config
    from tandem.core.structured.bitmask import apply_mask, build_mask
    from tandem.core.structured.compiler import Grammars
    from tandem.core.structured.spec import GrammarSpec
    from tandem.core.text.tokenizer import load_tokenizer

    mc = load_model_config(model)
    tok = load_tokenizer(mc.tokenizer)
    grammars = Grammars(tok.hf, mc.vocab_size, mc.eos_token_ids or [tok.eos_token_id])
    spec = GrammarSpec.json_schema(SCHEMA)
    logits = torch.randn(batch, mc.vocab_size)
    best = float("inf")
    for _ in range(repeats):
        states = [grammars.matcher(spec) if b < rows else None for b in range(batch)]
        start = time.perf_counter()
        for _ in range(steps):
            mask = build_mask(states, mc.vocab_size)
            x = apply_mask(logits, mask)  # type: ignore[arg-type]
            picked = x.argmax(dim=-1).tolist()
            for state, token in zip(states, picked):
                if state is not None:
                    state.accept(token)
        best = min(best, (time.perf_counter() - start) / steps)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--engines", nargs="+", default=["v0", "v1"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = ap.parse_args()
    global CLOCK
    CLOCK = CLOCKS[args.clock]
    from tandem.core import LLM
    from tandem.core.catalog.named_models import resolve_model

    model = resolve_model(args.model)
    half = args.batch // 2
    shapes = {
        "free": [False] * args.batch,
        "mixed": [True] * half + [False] * (args.batch - half),
        "constrained": [True] * args.batch,
    }
    report: dict[str, Any] = {
        "model": args.model,
        "batch": args.batch,
        "tokens": args.tokens,
        "clock": args.clock,
    }
    for engine in args.engines:
        with LLM(model, engine=engine, max_model_len=512) as llm:
            got = rates(llm, shapes, args.tokens, args.repeats)
        report[engine] = {**got, "mixed_ratio": got["mixed"] / got["free"]}
        print(
            f"{engine}: free {got['free']:.0f} tok/s | mixed {got['mixed']:.0f} tok/s "
            f"({got['mixed'] / got['free']:.2f}x) | constrained {got['constrained']:.0f} tok/s "
            f"({got['constrained'] / got['free']:.2f}x)"
        )
    work = grammar_ms(model, half, args.batch)
    step = 1e3 * args.batch / max(report[e]["free"] for e in args.engines)
    report["grammar_ms_per_step"] = work
    print(
        f"grammar work alone: {work:.2f} ms/step for {half} constrained rows of {args.batch} "
        f"(fastest free step: {step:.1f} ms; expected mixed ratio {step / (step + work):.2f}x)"
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "structured-mix.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
