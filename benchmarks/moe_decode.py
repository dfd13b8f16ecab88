"""Decode tokens/s of a mixture-of-experts model beside a dense model of the same
*active* parameter count, in the same run.

    python benchmarks/moe_decode.py [--batches 1 16] [--context 128] [--rounds 3] [--threads N]
        [--decode-stack c modules]

The MoE model is Mixtral-shaped: 8 experts of intermediate 768, top-2; the dense one is
the same Llama-shaped model with intermediate 2 x 768 = 1536, so one token multiplies by
the same number of weights in both. Each decode step is one forward through the paged
cache (every sequence at ``--context`` tokens) plus its logits; rounds alternate the two
models so that a busy spell of a shared machine falls on both. Prints the best step of
each model, tokens/s and the ratio dense / MoE (the goal: at most 1.3 at batch 1).

Both models run their decode steps as the engine chooses (the one-call C stack where it
takes the model). ``--decode-stack c modules`` adds the MoE model with
``decode_stack="modules"`` (layer by layer) beside it, and the ratio of the two: what the C
stack gains on a mixture of experts. Measured on the shared 2-core machine (load ~13),
``--threads 1 --rounds 5``, three runs: batch 1, 7.5-14.0 ms with the stack against
13.8-21.3 ms without (1.41-1.83x); batch 4, 1.14-1.55x.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from tandem.core.engine.loader import load_model
from tandem.core.kv.cache import allocate_kv_caches
from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.testing import make_model

SHAPE = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8}
EXPERT_INTER, EXPERTS, TOP_K = 768, 8, 2


def models(nostack: bool) -> dict[str, torch.nn.Module]:
    """The dense and MoE models; with ``nostack`` the MoE one again, layer by layer."""
    dense = make_model(size="small", arch="llama")
    moe = make_model(
        size="small",
        arch="mixtral",
        intermediate_size=EXPERT_INTER,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        sliding_window=None,
    )
    out = {"dense": load_model(dense), "moe": load_model(moe)}
    if nostack:
        out["moe modules"] = load_model(moe, kernels=resolve_kernels(decode_stack="modules"))
    return out


def active_params(model: torch.nn.Module) -> int:
    """Weights one token multiplies by (routed experts: top-k of them), embedding aside."""
    total = 0
    for name, p in model.named_parameters():
        if "embed_tokens" in name:
            continue
        if ".experts." in name:
            total += p.numel() * TOP_K // EXPERTS
        else:
            total += p.numel()
    return total


def decode_step(model: torch.nn.Module, batch: int, context: int) -> Callable[[], object]:
    spec, s = model.spec, 16
    per_seq = -(-(context + 1) // s)
    caches = allocate_kv_caches(
        spec.num_layers, spec.num_kv_heads, spec.head_dim, batch * per_seq, s, torch.float32, "cpu"
    )
    tables = [list(range(i * per_seq, (i + 1) * per_seq)) for i in range(batch)]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, spec.vocab_size, (batch * context,), generator=gen)
    model(
        ids,
        torch.arange(context).repeat(batch),
        caches,
        build_metadata([context] * batch, [context] * batch, tables, s),
    )
    meta = build_metadata([1] * batch, [context + 1] * batch, tables, s)
    nxt = torch.randint(4, spec.vocab_size, (batch,), generator=gen)
    pos = torch.full((batch,), context)

    def step() -> object:
        return model.compute_logits(model(nxt, pos, caches, meta))

    return step


def best_ms(step: Callable[[], object], seconds: float) -> float:
    step()
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        step()
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="per model and round")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--decode-stack", nargs="+", default=["c"], choices=("c", "modules"),
        help="c modules: the MoE model also layer by layer, and the C stack's gain",
    )  # fmt: skip
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    nostack = "modules" in args.decode_stack
    built = models(nostack)
    for name, model in built.items():
        stack = model.model.decode_stack
        takes = model.model.use_decode_stack and stack.weights_reason() is None
        how = "c stack" if takes else f"modules ({stack.weights_reason() or 'asked'})"
        print(
            f"{name}: {active_params(model) / 1e6:.1f}M active parameters (embedding aside), "
            f"decode {how}"
        )
    print(f"threads={torch.get_num_threads()} context={args.context}")
    heads = ("batch", "dense ms", "moe ms", "dense tok/s", "moe tok/s", "ratio")
    heads += ("moe modules ms", "c stack gain") if nostack else ()
    widths = (5, 10, 10, 13, 11, 7, 16, 14)
    print("".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
    for batch in args.batches:
        steps = {name: decode_step(m, batch, args.context) for name, m in built.items()}
        best = {name: float("inf") for name in steps}
        for _ in range(args.rounds):
            for name, step in steps.items():
                best[name] = min(best[name], best_ms(step, args.seconds))
        d, m = best["dense"], best["moe"]
        row = f"{batch:>5}{d:>10.2f}{m:>10.2f}{batch / d * 1e3:>13.0f}{batch / m * 1e3:>11.0f}"
        row += f"{m / d:>6.2f}x"
        if nostack:
            mm = best["moe modules"]
            row += f"{mm:>16.2f}{mm / m:>13.2f}x"
        print(row)


if __name__ == "__main__":
    main()
