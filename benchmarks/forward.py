"""Tandem forward vs transformers' eager forward on the same batch, in the same run.

    python benchmarks/forward.py [--size small] [--batch 16] [--prompt-len 128]

Times one prefill step (every prompt at once, last-token logits) and one decode step
(one token per sequence over the prompt's context), prints milliseconds and the
speed ratio transformers_ms / tandem_ms (>= 1.0 means tandem is at least as fast).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from tandem.core.engine.loader import load_model
from tandem.core.kv.cache import allocate_kv_caches
from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.testing import make_model


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=("tiny", "small"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    from transformers import AutoModelForCausalLM

    path = make_model(size=args.size, arch="llama")
    model = load_model(path)
    hf = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    spec = model.spec
    b, n, s = args.batch, args.prompt_len, args.block_size
    ids = torch.randint(4, spec.vocab_size, (b, n), generator=torch.Generator().manual_seed(0))
    nxt = torch.randint(4, spec.vocab_size, (b, 1), generator=torch.Generator().manual_seed(1))

    per_seq = (n + 1 + s - 1) // s
    caches = allocate_kv_caches(
        spec.num_layers, spec.num_kv_heads, spec.head_dim, b * per_seq, s, torch.float32, "cpu"
    )
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(b)]
    prefill_meta = build_metadata([n] * b, [n] * b, tables, s)
    decode_meta = build_metadata([1] * b, [n + 1] * b, tables, s)
    flat_ids, flat_pos = ids.reshape(-1), torch.arange(n).repeat(b)
    last = torch.arange(1, b + 1) * n - 1

    def tandem_prefill() -> torch.Tensor:
        hidden = model(flat_ids, flat_pos, caches, prefill_meta)
        return model.compute_logits(hidden[last])

    def tandem_decode() -> torch.Tensor:
        hidden = model(nxt.reshape(-1), torch.full((b,), n), caches, decode_meta)
        return model.compute_logits(hidden)

    past = hf(ids, use_cache=True, logits_to_keep=1).cache

    def hf_prefill() -> torch.Tensor:
        return hf(ids, use_cache=True, logits_to_keep=1).logits

    def hf_decode() -> torch.Tensor:
        out = hf(nxt, cache=past, use_cache=True).logits
        past.crop(-1)  # drop the decoded token so every repeat sees the same context
        return out

    tandem_prefill()
    torch.testing.assert_close(tandem_decode()[:, None], hf_decode(), atol=1e-3, rtol=1e-3)
    print(f"model={args.size} batch={b} prompt_len={n} threads={torch.get_num_threads()}")
    print(f"{'step':<10}{'tandem ms':>12}{'hf eager ms':>14}{'ratio':>8}")
    for name, ours, theirs in (
        ("prefill", tandem_prefill, hf_prefill),
        ("decode", tandem_decode, hf_decode),
    ):
        t_ours, t_hf = timed(ours, args.repeats), timed(theirs, args.repeats)
        print(f"{name:<10}{t_ours:>12.1f}{t_hf:>14.1f}{t_hf / t_ours:>7.2f}x")


if __name__ == "__main__":
    main()
