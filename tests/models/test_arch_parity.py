"""Every architecture past the Llama family, forward through the paged cache against
transformers' eager forward (fp32, 1e-4): prompts longer than the windows, chunked
prefill over cached context, decodes riding in the same steps.

The tiny configs (``tandem.core.testing.archs``) set each family's traps: windows
shorter than the prompts, head sizes unrelated to hidden / heads, multipliers and soft
caps far from neutral, partial rotary with longrope, local and global rope bases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tandem.core.config.model import load_model_config
from tandem.core.engine.loader import load_model
from tandem.core.testing import make_model
from tandem.core.testing.archs import TRAPS

ATOL = 1e-4
ARCHS = list(TRAPS)
# the context each checkpoint is run with: Phi-3's longrope takes its short factors up
# to 64 positions (its pretraining length), as transformers does for such sequences
MAX_LEN = {"phi3": 64}
CPU = torch.device("cpu")


def load_pair(arch: str, max_model_len: int) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(tandem's model, transformers' eager model) of the architecture's tiny checkpoint."""
    from transformers import AutoModelForCausalLM

    path: Path = make_model(arch=arch)
    ours = load_model(load_model_config(path, max_model_len=max_model_len, device=CPU))
    hf = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    )
    return ours, hf.eval()


@pytest.fixture(scope="module")
def pair(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, torch.nn.Module]:
    return load_pair(request.param, MAX_LEN.get(request.param, 128))


def hf_logits(hf: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0].float()  # [L, V]


def prompts(lengths: list[int], seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 512, (n,), generator=gen).tolist() for n in lengths]


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    diff = (actual - expected).abs().max().item()
    assert diff < ATOL, f"{what}: max |tandem - transformers| = {diff:.3g} >= {ATOL}"


@pytest.mark.parametrize("pair", ARCHS, indirect=True)
def test_prefill_chunks_and_decodes_match_transformers(pair, paged_runner):
    model, hf = pair
    long, short, other = prompts([23, 5, 14], seed=1)
    runner = paged_runner(model, block_size=4, num_blocks=64, seed=2)
    # step 1: the long prompt's first chunk and a whole short prompt
    head = runner.step([(0, long[:9]), (1, short)])
    close(head[:9], hf_logits(hf, long)[:9], "first chunk")
    close(head[9:], hf_logits(hf, short), "short prompt")
    short.append(int(head[-1].argmax()))
    # step 2: the rest of the long prompt over 9 cached tokens, a new prompt, a decode
    tail = runner.step([(0, long[9:]), (2, other), (1, [short[-1]])])
    close(tail[:14], hf_logits(hf, long)[9:], "second chunk over cached context")
    close(tail[14:28], hf_logits(hf, other), "prompt beside a chunk")
    close(tail[-1], hf_logits(hf, short)[-1], "decode beside prefills")
    seqs = {0: long, 1: short, 2: other}
    last = {0: tail[13], 1: tail[-1], 2: tail[27]}
    for _ in range(3):  # decodes, each past every window
        for sid, seq in seqs.items():
            seq.append(int(last[sid].argmax()))
        logits = runner.step([(sid, [seq[-1]]) for sid, seq in seqs.items()])
        for row, (sid, seq) in zip(logits, seqs.items()):
            close(row, hf_logits(hf, seq)[-1], f"decode of sequence {sid} at {len(seq)}")
            last[sid] = row


def test_phi3_long_context_takes_the_long_factors(paged_runner):
    """With room past the pretraining length the long factors rotate every position, as
    transformers does for a sequence that long."""
    model, hf = load_pair("phi3", 512)
    (seq,) = prompts([80], seed=3)
    runner = paged_runner(model, block_size=8, num_blocks=32)
    close(runner.step([(0, seq)]), hf_logits(hf, seq), "prefill of 80 tokens")


@pytest.mark.parametrize(
    ("arch", "traits"),
    [
        ("qwen2_window", {"windows": (None, 6)}),
        ("mistral_window", {"windows": (8, 8)}),
        ("gemma2", {"windows": (8, None), "norm": "sandwich", "final_softcap": 4.0}),
        ("gemma3", {"windows": (8, None), "norm": "sandwich", "final_softcap": 6.0}),
        ("olmo2", {"norm": "post"}),
        ("phi3", {"windows": (10, 10)}),
    ],
)
def test_specs_carry_the_traps(arch, traits):
    model = load_model(make_model(arch=arch))
    for name, value in traits.items():
        assert getattr(model.spec, name) == value, name
    if arch == "gemma3":  # transformers reads the attention soft cap but never applies it
        assert model.spec.attention.softcap is None
        local, global_ = (layer.rope for layer in model.spec.layers)
        assert (local.theta, local.type, global_.theta, global_.type) == (
            10000.0,
            "default",
            1e6,
            "linear",
        )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("arch", ARCHS)
def test_half_precision_runs_close_to_fp32(arch, dtype, paged_runner):
    """Every architecture in bf16 and fp16 (weights, activations and KV cache): finite,
    and the same top token as fp32 at most positions (greedy ties move in half precision)."""
    path = make_model(arch=arch)
    half, full = load_model(path, dtype=dtype), load_model(path)
    (seq,) = prompts([20], seed=5)
    runner = paged_runner(half)
    runner.caches = [(k.to(dtype), v.to(dtype)) for k, v in runner.caches]
    low = runner.step([(0, seq)])
    high = paged_runner(full).step([(0, seq)])
    assert torch.isfinite(low).all()
    agree = (low.argmax(-1) == high.argmax(-1)).float().mean().item()
    assert agree >= 0.75, f"{dtype}: top-1 agreement with fp32 {agree:.2f} < 0.75"
