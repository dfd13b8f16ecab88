"""int8 linear layers (``quantization="int8"``): the kernel, the option, and quality."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tandem.core.config.engine_args import EngineArgs
from tandem.core.layers.weight_form import Int8
from tandem.kernels.ops.linear_int8 import Int8Weight, int8_available, linear_int8

needs_int8 = pytest.mark.skipif(not int8_available(), reason="torch has no int8 matmul here")


@needs_int8
@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 40),
    k=st.integers(1, 96),
    n=st.integers(1, 80),
    bias=st.booleans(),
    seed=st.integers(0, 2**31),
)
@example(m=1, k=1, n=2, bias=False, seed=0)  # one input channel: torch's _int_mm gives zeros
@example(m=1, k=68, n=1, bias=False, seed=294)  # an output that cancels to ~0.02
def test_int8_linear_is_close_to_fp32(m, k, n, bias, seed) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) * 0.1
    b = torch.randn(n, generator=g) if bias else None
    packed = Int8Weight.pack(w, b)
    assert packed is not None and packed.shape == (n, k)
    got, want = linear_int8(x, packed), F.linear(x, w, b)
    assert got.shape == want.shape and got.dtype == torch.float32
    # the rounding bound: each weight within max|row| / 254 and each activation within its
    # row's range / 510 (half a step of 255); an output that cancels to ~0 keeps this
    # bound, not a fraction of itself
    w_step = w.abs().amax(dim=1) / 254.0  # [N]
    x_step = (x.amax(dim=1).clamp_min(0) - x.amin(dim=1).clamp_max(0)) / 510.0  # [M]
    bound = x.abs().sum(dim=1, keepdim=True) * w_step + x_step[:, None] * w.abs().sum(dim=1)
    assert bool(((got - want).abs() <= bound * 1.01 + 1e-4).all())


@needs_int8
def test_int8_linear_checks_its_input() -> None:
    packed = Int8Weight.pack(torch.randn(4, 8))
    with pytest.raises(ValueError, match=r"x must have shape \[\.\.\., 8\]"):
        linear_int8(torch.randn(2, 7), packed)


def test_quantization_option_is_checked(tiny_model) -> None:
    with pytest.raises(
        ValueError, match="quantization must be one of None, int8, gguf, got 'int4'"
    ):
        EngineArgs(model=str(tiny_model), quantization="int4")
    with pytest.raises(ValueError, match="quantization='int8' runs on the CPU with dtype float32"):
        EngineArgs(model=str(tiny_model), quantization="int8", dtype="bfloat16").create_config()


@needs_int8
@pytest.mark.slow
def test_int8_agrees_with_fp32_on_the_real_model(smollm2) -> None:
    """Teacher-forced on fp32's greedy continuations of SmolLM2: int8's most likely token is
    fp32's at >= 95% of the positions, and its logprob of that token stays close."""
    from tandem.core import LLM, SamplingParams

    prompts = [
        "The capital of France is",
        "Water boils at a temperature of",
        "The three primary colors are",
        "def add(a, b):",
        "In 1492, Christopher Columbus",
        "The largest planet in the solar system is",
        "A haiku about autumn:",
        "The chemical symbol for gold is",
        "To make a cup of tea, first",
        "The theory of relativity was proposed by",
        "for i in range(10):",
        "Photosynthesis is the process by which",
        "The best way to learn a new language is",
        "Once upon a time, in a small village,",
        "The speed of light is approximately",
        "SELECT name FROM users WHERE",
    ]
    # 16 x 48 positions: one more or fewer disagreement moves the rate by 0.13%, where
    # 8 x 32 moved it by 0.4% and the rate itself by ~1.5% between two float32 kernels
    greedy = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True, logprobs=0)
    with LLM(model=smollm2, engine="v0", max_model_len=256) as llm:
        refs = llm.generate(prompts, greedy, use_tqdm=False)
    forced = [{"prompt_token_ids": r.prompt_token_ids + r.outputs[0].token_ids} for r in refs]
    score = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    with LLM(model=smollm2, engine="v0", quantization="int8", max_model_len=256) as llm:
        scored = llm.generate(forced, score, use_tqdm=False)
    agree, errors = [], []
    for ref, q in zip(refs, scored):
        start = len(ref.prompt_token_ids)
        for j, tok in enumerate(ref.outputs[0].token_ids):
            entry = q.prompt_logprobs[start + j][tok]
            agree.append(entry.rank == 1)
            errors.append(abs(entry.logprob - ref.outputs[0].logprobs[j][tok].logprob))
    agreement, mean_error = sum(agree) / len(agree), sum(errors) / len(errors)
    print(f"int8 vs fp32: top-1 agreement {agreement:.3f}, mean |logprob error| {mean_error:.4f}")
    assert agreement >= 0.95, agreement
    assert mean_error < 0.1, mean_error


@needs_int8
def test_int8_switches_all_but_the_qkv_projection(tiny_model) -> None:
    from tandem.core.engine.loader import load_model

    fp32 = load_model(str(tiny_model), dtype=torch.float32)
    int8 = load_model(str(tiny_model), dtype=torch.float32, quantization="int8")

    def head(model):  # the LM head's int8 form, tied to the embedding or not
        form = model._tied_int8 if model.lm_head is None else model.lm_head.form
        return form if isinstance(form, Int8) else None

    def int8_form(linear) -> bool:
        return isinstance(linear.form, Int8)

    assert head(fp32) is None and head(int8) is not None
    for layer in int8.model.layers:
        assert int8_form(layer.mlp.gate_up_proj) and int8_form(layer.mlp.down_proj)
        assert int8_form(layer.self_attn.o_proj) and not int8_form(layer.self_attn.qkv_proj)
    hidden = torch.randn(5, fp32.spec.hidden_size)
    want, got = fp32.compute_logits(hidden), int8.compute_logits(hidden)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert float((got - want).abs().max()) <= 0.05 * float(want.abs().max())
    int8.to(torch.float32)  # moving the model drops the int8 copies, as Linear does
    assert head(int8) is None
