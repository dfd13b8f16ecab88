"""Latent attention (DeepSeek's MLA) in the one-call C stack: q through its own latent
or straight from the hidden state, the kv latent and its norm, rope on the shared k_pe and
each head's q_pe, the absorbed query and the value step over the cached latent rows. The
same tokens, logprobs and logits as the modules, bit for bit, with fp32, int8 and
GGUF-block weights (DeepSeek-V3's tiny configs with every layer's MLP dense); and a
stack that scales the scores otherwise does not pass for it."""

from __future__ import annotations

import pytest
import torch

from tandem.core.models import decode_stack, stack_latent, stack_table
from tandem.core.testing import make_model
from tandem.kernels import native

from .test_decode_stack import _same_as_modules
from .test_decode_stack_phi3 import _loaded, _logits

pytestmark = pytest.mark.skipif(not decode_stack.native.available(), reason="no C kernels here")
F32 = pytest.mark.skipif(not native.linear_f32.available(), reason="no C fp32 linear kernel")
# every layer's MLP dense (the experts: test_decode_stack_moe.py); q's latent and
# the heads' values 64 wide, so that every projection takes 32-value GGUF blocks
DENSE = {
    "deepseek_v3": {"first_k_dense_replace": 2, "q_lora_rank": 64, "v_head_dim": 16},
    "deepseek_v3_plain": {"first_k_dense_replace": 2},  # q straight from x, biases, halves
}


def _model(arch: str, tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    return str(make_model(size="tiny", arch=arch, **DENSE[arch]))


def _keep_as(model: torch.nn.Module, fmt: int) -> None:
    """Every linear layer of the stack in GGUF blocks of ``fmt`` (kv_b stays fp32: the
    module path reads it in slices)."""
    from tandem.kernels.gguf_blocks import quantize

    for layer in model.model.layers:
        lins = stack_latent.attention_linears(layer.self_attn, True)
        for lin in (*lins.values(), layer.mlp.gate_up_proj, layer.mlp.down_proj):
            lin.use_quantized(quantize(lin.weight.detach(), fmt))
            lin.register_parameter("weight", None)
    model.model.decode_stack.drop()


@pytest.mark.parametrize("arch", list(DENSE))
def test_the_spec_puts_latent_attention_on_the_stack(arch, tmp_path, monkeypatch):
    stack = _loaded(_model(arch, tmp_path, monkeypatch)).model.decode_stack
    assert stack.usable, stack.reason
    assert "latent attention" in stack.describe()


@F32
@pytest.mark.parametrize("arch", list(DENSE))
def test_fp32_answers_match_the_modules(arch, tmp_path, monkeypatch):
    ran = _same_as_modules(_model(arch, tmp_path, monkeypatch), monkeypatch, dtype="float32")
    assert ran.count("step") >= 9  # every decode step of every sequence's batch


@pytest.mark.skipif(not native.linear_i8.available(), reason="no C int8 linear kernel here")
def test_int8_answers_match_the_modules(tmp_path, monkeypatch):
    model = _model("deepseek_v3", tmp_path, monkeypatch)
    _same_as_modules(model, monkeypatch, dtype="float32", quantization="int8")


@pytest.mark.parametrize("fmt", [8, 3], ids=["Q8_0", "Q4_1"])
def test_gguf_blocks_match_the_modules(fmt, tmp_path, paged_runner, monkeypatch, stack_ran):
    """Logits of a prompt step, decode steps and a verify's layout, bit for bit."""
    model = _loaded(_model("deepseek_v3", tmp_path, monkeypatch))
    _keep_as(model, fmt)
    logits = _logits(model, paged_runner, stack_ran)
    for got, want in zip(logits["c"], logits["modules"], strict=True):
        assert torch.equal(got, want)


@F32
def test_scores_scaled_otherwise_do_not_match(tmp_path, paged_runner, monkeypatch, stack_ran):
    """The comparison can fail: a table whose latent layers scale the scores by 1.5x
    their scale gives other logits than the modules."""
    model = _loaded(_model("deepseek_v3", tmp_path, monkeypatch))
    real = stack_latent.settings

    def rescaled(attn, latent):
        out = real(attn, latent)
        return out | {"scale": out["scale"] * 1.5}

    monkeypatch.setattr(stack_table, "settings", rescaled)
    logits = _logits(model, paged_runner, stack_ran)
    assert not torch.equal(logits["c"][1], logits["modules"][1])
