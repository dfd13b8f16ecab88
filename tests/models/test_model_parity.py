"""Tandem forward through the paged cache vs transformers' eager forward (fp32, 1e-4)."""

from __future__ import annotations

import pytest
import torch

ATOL = 1e-4
ARCHS = ("llama", "mistral", "qwen2")


def hf_logits(hf: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0].float()  # [L, V]


def prompts(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(4, vocab, (n,), generator=gen).tolist() for n in lengths]


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    diff = (actual - expected).abs().max().item()
    assert diff < ATOL, f"max |tandem - transformers| = {diff:.3g} >= {ATOL}"


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_then_decode_matches_transformers(arch, tandem_models, hf_models, paged_runner):
    model, hf = tandem_models[arch], hf_models[arch]
    seqs = prompts(model.spec.vocab_size, [7, 1, 12, 3], seed=1)
    runner = paged_runner(model)
    logits = runner.step(list(enumerate(seqs)))
    offset = 0
    for seq in seqs:
        close(logits[offset : offset + len(seq)], hf_logits(hf, seq))
        offset += len(seq)
    last = [logits[sum(map(len, seqs[: i + 1])) - 1] for i in range(len(seqs))]
    for _ in range(4):
        for seq, row in zip(seqs, last):
            seq.append(int(row.argmax()))
        logits = runner.step([(i, [seq[-1]]) for i, seq in enumerate(seqs)])
        for seq, row in zip(seqs, logits):
            close(row, hf_logits(hf, seq)[-1])
        last = list(logits)


@pytest.mark.parametrize("arch", ARCHS)
def test_mixed_prefill_and_decode_step(arch, tandem_models, hf_models, paged_runner):
    model, hf = tandem_models[arch], hf_models[arch]
    first, second = prompts(model.spec.vocab_size, [9, 5], seed=2)
    runner = paged_runner(model, block_size=2, seed=3)
    first.append(int(runner.step([(0, first)])[-1].argmax()))
    logits = runner.step([(1, second), (0, [first[-1]])])  # prefill first, then the decode
    close(logits[: len(second)], hf_logits(hf, second))
    close(logits[-1], hf_logits(hf, first)[-1])


@pytest.mark.parametrize("arch", ARCHS)
def test_chunked_prefill_matches_transformers(arch, tandem_models, hf_models, paged_runner):
    model, hf = tandem_models[arch], hf_models[arch]
    prompt, other = prompts(model.spec.vocab_size, [13, 6], seed=4)
    runner = paged_runner(model, block_size=4, seed=5)
    head = runner.step([(0, prompt[:6]), (1, other)])
    other.append(int(head[-1].argmax()))
    # second chunk has 6 tokens of context in the cache; a decode rides in the same step
    tail = runner.step([(0, prompt[6:]), (1, [other[-1]])])
    expected = hf_logits(hf, prompt)
    close(head[:6], expected[:6])
    close(tail[:-1], expected[6:])
    close(tail[-1], hf_logits(hf, other)[-1])


def test_greedy_generation_is_not_degenerate(tandem_models, paged_runner):
    model = tandem_models["llama"]
    runner = paged_runner(model)
    seq = prompts(model.spec.vocab_size, [5], seed=6)[0]
    logits = runner.step([(0, seq)])
    out = []
    for _ in range(24):
        out.append(int(logits[-1].argmax()))
        logits = runner.step([(0, [out[-1]])])
    assert len(set(out)) >= 8, f"greedy output collapsed: {out}"
