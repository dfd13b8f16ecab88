"""Phi 3's layer program in the one-call C stack: rope over the leading 3/4 of each head
(longrope factors), fused q/k/v and gate/up, a window on every layer. The same tokens,
logprobs and logits as the modules, bit for bit, with fp32, int8 and GGUF-block weights;
and a program that rotates the whole head does not pass for it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.models import decode_stack, stack_program, stack_table
from tandem.core.testing import make_model
from tandem.kernels import native

from .test_decode_stack import _same_as_modules
from .test_decode_stack_forms import _keep_as

pytestmark = pytest.mark.skipif(not decode_stack.native.available(), reason="no C kernels here")
F32 = pytest.mark.skipif(not native.linear_f32.available(), reason="no C fp32 linear kernel")


@pytest.fixture
def phi3(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    return str(make_model(size="tiny", arch="phi3"))


def _loaded(path: str) -> torch.nn.Module:
    from tandem.core.engine.loader import load_model

    return load_model(path, dtype=torch.float32)


def _logits(model: torch.nn.Module, runner_type, ran: list[bool]) -> dict[str, list]:
    """Each mode's logits over a prompt step, decode steps past the window and a step laid
    out as a prefill after context (a verify); asserts the C stack took every step."""
    steps = [[(0, [5, 9, 2, 7, 7, 1]), (1, [7, 1, 3])]]
    steps += [[(0, [3]), (1, [4])] for _ in range(8)]  # past the window of 10
    steps += [[(0, [8, 2, 6]), (1, [1, 5])]]
    out = {}
    for mode in ("modules", "c"):
        ran.clear()
        model.use_kernels(resolve_kernels(decode_stack=mode))
        runner = runner_type(model)
        out[mode] = [runner.step(chunks) for chunks in steps]
    assert all(ran) and len(ran) == len(steps)  # the C stack took every step of its pass
    return out


def test_the_spec_puts_phi3_on_the_stack(phi3):
    model = _loaded(phi3)
    stack = model.model.decode_stack
    assert stack.usable, stack.reason
    assert "rotary 0.75 of each head" in stack.describe()
    rotary = model.model.layers[0].self_attn.rotary
    assert stack_program.program(model.spec, 0).rotary_dim == rotary.rotary_dim < rotary.head_dim


@F32
def test_fp32_answers_match_the_modules(phi3, monkeypatch):
    ran = _same_as_modules(phi3, monkeypatch, dtype="float32")
    assert ran.count("step") >= 9  # every decode step of every sequence's batch


@pytest.mark.skipif(not native.linear_i8.available(), reason="no C int8 linear kernel here")
def test_int8_answers_match_the_modules(phi3, monkeypatch):
    _same_as_modules(phi3, monkeypatch, dtype="float32", quantization="int8")


@pytest.mark.parametrize("formats", [(8, 2), (6, 3)], ids=["Q8_0+Q4_0", "Q5_0+Q4_1"])
def test_gguf_blocks_match_the_modules(formats, phi3, paged_runner, stack_ran):
    """Every linear layer in GGUF blocks (q/k/v a stack of two formats): logits and verify
    steps bit for bit the modules'."""
    model = _loaded(phi3)
    _keep_as(model, *formats)
    logits = _logits(model, paged_runner, stack_ran)
    for got, want in zip(logits["c"], logits["modules"], strict=True):
        assert torch.equal(got, want)


@F32
def test_a_program_rotating_the_whole_head_does_not_match(
    phi3, paged_runner, monkeypatch, stack_ran
):
    """The comparison can fail: the stack told to rotate all of each head (its table read
    as if it were as wide as the head) gives other logits than the modules."""
    model = _loaded(phi3)

    def whole_head(spec, index):
        return dataclasses.replace(real(spec, index), rotary_dim=0)

    real = stack_program.program
    monkeypatch.setattr(stack_table, "program", whole_head)
    logits = _logits(model, paged_runner, stack_ran)
    assert not torch.equal(logits["c"][1], logits["modules"][1])
