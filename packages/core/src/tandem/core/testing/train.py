"""A short, deterministic training run that turns a random tiny checkpoint into one that
writes corpus-like text, so the built-in model's output reads as words, not noise.

It trains on the same built-in corpus the tokenizer was trained on; a few hundred steps
of a 2-layer, 64-wide model take seconds on a CPU.
"""

from __future__ import annotations

from typing import Any

import torch

from tandem.core.testing.tokenizer import corpus

WINDOW = 64
BATCH = 16
LEARNING_RATE = 3e-3


def token_stream(tokenizer: Any) -> torch.Tensor:
    """Every corpus line as ``<s> line </s>``, concatenated: [N] int64."""
    ids: list[int] = []
    for line in corpus():
        ids += tokenizer(line)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.int64)


def train(model: torch.nn.Module, tokenizer: Any, steps: int, seed: int) -> float:
    """Next-token training on random windows of the corpus; returns the last loss.

    Runs under the caller's seeded RNG state and one thread, so the result is the same
    on every machine that has the same torch build.
    """
    stream = token_stream(tokenizer)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model.train()
    loss = torch.tensor(float("nan"))
    try:
        for _ in range(steps):
            starts = torch.randint(0, len(stream) - WINDOW - 1, (BATCH,), generator=gen)
            batch = torch.stack([stream[s : s + WINDOW + 1] for s in starts.tolist()])
            logits = model(input_ids=batch[:, :-1]).logits  # [B, W, V]
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
        model.eval()
    return float(loss.detach())
