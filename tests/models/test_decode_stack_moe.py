"""Mixture-of-experts layers in the one-call C decode stack: routing (softmax, top-k,
renormalised or not; DeepSeek-V3's group-limited sigmoid with its score bias and
scaling), the routed experts in each form their weights are kept in (fp32, int8, GGUF
blocks, stacked formats), the shared expert and its sigmoid gate; the modules' logits,
bit for bit."""

from __future__ import annotations

import pytest
import torch

from tandem.core.engine.loader import load_model
from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.models import decode_stack, stack_moe
from tandem.core.testing import make_model
from tandem.kernels import native
from tandem.kernels.gguf_blocks import QuantStack, quantize

pytestmark = pytest.mark.skipif(
    not (decode_stack.native.available() and native.linear_f32.available()),
    reason="no C kernels (or no C fp32 linear kernel) here",
)

# Mixtral (every layer sparse, renormalised, two experts' routers tied), Qwen2-MoE (a
# sigmoid-gated shared expert, weights not renormalised, q/k/v biases), Qwen3-MoE (q/k
# norms, renormalised), each with a dense layer among the sparse ones where it can have one
MOES = {
    "mixtral": {},
    "qwen2_moe": {"decoder_sparse_step": 2},
    "qwen3_moe": {"mlp_only_layers": [1]},
}
# DeepSeek-V3: latent attention, a dense first layer, then sparse layers routing top-3 of 8
# experts in the 2 best of 4 groups (score bias, renormalised, x2.5) plus a shared expert;
# its plain config: every layer sparse, one group, unnormalised, x1.5, two shared experts
DEEPSEEK = {"deepseek_v3": {"num_hidden_layers": 3}, "deepseek_v3_plain": {}}
# a prompt step, decode steps of two sequences, a verify-shaped step of new tokens each
STEPS = [[(0, [5, 9, 2, 7, 7, 1]), (1, [7, 1, 3])]]
STEPS += [[(0, [3]), (1, [4])] for _ in range(4)] + [[(0, [2])]]
STEPS += [[(0, [8, 2, 6]), (1, [1, 5])]]


def _model(arch: str, tmp_path, monkeypatch) -> torch.nn.Module:
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    overrides = {**MOES, **DEEPSEEK}[arch]
    return load_model(str(make_model(size="tiny", arch=arch, **overrides)), dtype=torch.float32)


def _logits(model: torch.nn.Module, paged_runner, mode: str, ran: list) -> list[torch.Tensor]:
    model.use_kernels(resolve_kernels(decode_stack=mode))
    runner = paged_runner(model)
    before = len(ran)
    out = [runner.step(chunks) for chunks in STEPS]
    took = ran[before:]  # the C stack took every step, or none (modules: not asked)
    assert took == ([True] * len(STEPS) if mode == "c" else [])
    return out


def _same(model: torch.nn.Module, paged_runner, ran: list) -> None:
    want = _logits(model, paged_runner, "modules", ran)
    got = _logits(model, paged_runner, "c", ran)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize("arch", list(MOES))
def test_fp32_experts_match_the_modules(arch, tmp_path, monkeypatch, paged_runner, stack_ran):
    model = _model(arch, tmp_path, monkeypatch)
    stack = model.model.decode_stack
    assert stack.usable and stack.weights_reason() is None
    assert "experts (softmax top-" in stack.describe()
    _same(model, paged_runner, stack_ran)


@pytest.mark.skipif(not native.linear_i8.available(), reason="no C int8 linear kernel here")
@pytest.mark.parametrize("arch", list(MOES))
def test_int8_experts_match_the_modules(arch, tmp_path, monkeypatch, paged_runner, stack_ran):
    model = _model(arch, tmp_path, monkeypatch)
    model.quantize("int8")
    moes = [ly.mlp for ly in model.model.layers if hasattr(ly.mlp, "experts")]
    assert moes and all(m.experts.int8 is not None for m in moes)
    _same(model, paged_runner, stack_ran)


def _keep_experts(model: torch.nn.Module, qtypes: tuple[int, ...], down: int) -> None:
    """Every routed expert kept in GGUF blocks, as a loader keeps them: gate/up in
    ``qtypes`` (two formats: gate in the first, up in the second, a stack), down in
    ``down``; no float weight left."""
    for layer in model.model.layers:
        experts = getattr(layer.mlp, "experts", None)
        if experts is None:
            continue
        for name, formats in (("gate_up", qtypes), ("down", (down,))):
            stacked = getattr(experts, name)
            kept = []
            for w in stacked.weight.detach():
                parts = [quantize(rows, q) for rows, q in zip(w.chunk(len(formats)), formats)]
                kept.append(parts[0] if len(parts) == 1 else QuantStack(tuple(parts)))
            stacked.register_parameter("weight", None)
            stacked.use_quantized(kept)
    model.model.decode_stack.drop()


@pytest.mark.parametrize(
    ("arch", "gate_up", "down"),
    [("qwen2_moe", (8,), 2), ("mixtral", (8, 6), 3), ("qwen3_moe", (12,), 14)],
    ids=["Q8_0", "Q8_0+Q5_0-stacked", "Q4_K+Q6_K"],
)
def test_gguf_experts_match_the_modules(
    arch, gate_up, down, tmp_path, monkeypatch, paged_runner, stack_ran
):
    """Experts kept in their blocks: one format, two stacked along the gate/up rows, and
    K-quants; the steps of more than 16 rows run the fp32-tile GGUF kernel."""
    shape = {"hidden_size": 256, "moe_intermediate_size": 256, "intermediate_size": 256}
    if arch == "mixtral":
        shape = {"hidden_size": 256, "intermediate_size": 256}
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    src = make_model(size="tiny", arch=arch, **MOES[arch], **shape)
    model = load_model(str(src), dtype=torch.float32)
    _keep_experts(model, gate_up, down)
    assert model.model.decode_stack.weights_reason() is None
    _same(model, paged_runner, stack_ran)


def test_routing_off_by_one_expert_does_not_match(tmp_path, monkeypatch, paged_runner, stack_ran):
    """The stack routes as the spec says: one expert more a token changes the logits."""
    model = _model("qwen3_moe", tmp_path, monkeypatch)
    want = _logits(model, paged_runner, "modules", stack_ran)
    monkeypatch.setattr(stack_moe, "top_k", lambda moe: moe.top_k + 1)
    model.model.decode_stack.drop()
    got = _logits(model, paged_runner, "c", stack_ran)
    assert not all(torch.equal(g, w) for g, w in zip(got, want))


def test_routing_beyond_the_c_kernel_runs_the_modules(tmp_path, monkeypatch):
    from dataclasses import replace

    from tandem.core.models.stack_program import why_not

    spec = _model("deepseek_v3", tmp_path, monkeypatch).spec
    far = {"num_experts": 256, "top_k": 8, "n_group": 128, "topk_group": 2}  # groups sorted
    layers = [
        replace(ly, mlp=replace(ly.mlp, moe=replace(ly.mlp.moe, **far)))
        if ly.mlp is not None and ly.mlp.moe is not None
        else ly
        for ly in spec.layers
    ]
    assert "the 2 best of 128 groups" in why_not(replace(spec, layers=tuple(layers)))


def _sparse(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [ly.mlp for ly in model.model.layers if hasattr(ly.mlp, "experts")]


@pytest.mark.parametrize("arch", list(DEEPSEEK))
def test_group_limited_sigmoid_experts_match_the_modules(
    arch, tmp_path, monkeypatch, paged_runner, stack_ran
):
    """DeepSeek-V3's routing on the stack: the groups limit the choice (some token's
    experts would differ without them), the score bias steers it, and the logits of a
    prompt step, decode steps and a verify's layout are the modules', bit for bit."""
    model = _model(arch, tmp_path, monkeypatch)
    moe = model.spec.layer_mlp(model.spec.num_layers - 1).moe
    stack = model.model.decode_stack
    assert stack.usable and stack.weights_reason() is None, stack.reason
    assert "experts (sigmoid top-" in stack.describe()
    sparse = _sparse(model)
    assert sparse and all(m.gate.e_score_correction_bias.abs().sum() > 0 for m in sparse)
    if arch == "deepseek_v3":
        assert 1 < moe.topk_group < moe.n_group and moe.routed_scaling != 1.0
        assert not isinstance(model.model.layers[0].mlp, type(sparse[0]))  # dense first
        assert len(sparse) >= 2
    _same(model, paged_runner, stack_ran)


@pytest.mark.skipif(not native.linear_i8.available(), reason="no C int8 linear kernel here")
def test_int8_group_limited_experts_match_the_modules(
    tmp_path, monkeypatch, paged_runner, stack_ran
):
    model = _model("deepseek_v3", tmp_path, monkeypatch)
    model.quantize("int8")
    assert all(m.experts.int8 is not None for m in _sparse(model))
    _same(model, paged_runner, stack_ran)


def test_routing_without_the_score_bias_does_not_match(
    tmp_path, monkeypatch, paged_runner, stack_ran
):
    """The stack takes the router's score bias: a table made without it routes
    otherwise, and the logits differ."""
    model = _model("deepseek_v3", tmp_path, monkeypatch)
    want = _logits(model, paged_runner, "modules", stack_ran)
    monkeypatch.setattr(stack_moe, "score_bias", lambda mlp: None)
    model.model.decode_stack.drop()
    got = _logits(model, paged_runner, "c", stack_ran)
    assert not all(torch.equal(g, w) for g, w in zip(got, want))
