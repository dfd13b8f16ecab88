"""The model's linear layers on the C kernel (the CPU default), oneDNN and F.linear agree."""

from __future__ import annotations

import pytest
import torch

from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.layers.linear import Linear
from tandem.kernels.native import linear_f32
from tandem.kernels.native.linear_f32 import PackedF32
from tandem.kernels.ops.linear import onednn_dtypes

ARCHS = ("llama", "qwen2")  # untied lm_head; tied embeddings + q/k/v bias


def _logits(runner_cls, model, tokens):
    return runner_cls(model).step([(0, tokens)])


@pytest.mark.parametrize("kernel", ["native", "onednn"])
@pytest.mark.parametrize("arch", ARCHS)
def test_packed_and_torch_linear_agree(arch, kernel, tandem_models, paged_runner, use_kernels):
    if torch.float32 not in onednn_dtypes():
        pytest.skip("this torch build has no oneDNN")
    if kernel == "native" and not linear_f32.available():
        pytest.skip("no C fp32 linear kernel here (no compiler, or neither AVX-512 nor AVX2)")
    model = tandem_models[arch]
    tokens = list(range(4, 40))
    use_kernels(model, linear="torch")
    plain = _logits(paged_runner, model, tokens)
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    assert all(m.kernel == "torch" and not m.form.pack.holds(m.weight, "torch") for m in layers)
    use_kernels(model, linear=kernel)
    packed = _logits(paged_runner, model, tokens)
    torch.testing.assert_close(packed, plain, atol=1e-4, rtol=1e-4)
    assert layers and all(m.form.pack.holds(m.weight, kernel) for m in layers)
    copies = [m.form.pack.get(m.weight, kernel) for m in layers]
    assert all(isinstance(c, PackedF32) == (kernel == "native") for c in copies)


def test_default_is_native(monkeypatch):
    monkeypatch.delenv("TANDEM_CPU_LINEAR", raising=False)
    assert resolve_kernels().linear == "native"
    assert Linear(4, 4).kernel == "native"


def test_env_sets_the_default_once(monkeypatch):
    monkeypatch.setenv("TANDEM_CPU_LINEAR", "onednn")
    assert resolve_kernels().linear == "onednn"
    assert resolve_kernels(linear="torch").linear == "torch"  # a value given wins


def test_bad_value_is_refused(monkeypatch):
    monkeypatch.setenv("TANDEM_CPU_LINEAR", "mkl")
    with pytest.raises(ValueError, match="TANDEM_CPU_LINEAR='mkl' is not allowed; choose one of"):
        resolve_kernels()
    with pytest.raises(ValueError, match="kernel must be one of native, onednn, torch"):
        Linear(4, 4).use_kernel("mkl")


def test_moving_the_layer_drops_the_packed_copy():
    layer = Linear(8, 4, bias=True)
    x = torch.randn(3, 8)
    with torch.no_grad():
        layer(x)
        layer.double()
        out = layer(x.double())  # packed again from the float64 weight: the plain path
    assert out.dtype == torch.float64
    torch.testing.assert_close(
        out, torch.nn.functional.linear(x.double(), layer.weight, layer.bias)
    )


@pytest.mark.parametrize("int8", [False, True])
def test_long_step_mlp_runs_in_row_chunks_with_the_same_result(int8, tandem_models, monkeypatch):
    from tandem.core.layers import mlp as mlp_module

    spec = tandem_models["llama"].spec
    torch.manual_seed(0)
    mlp = mlp_module.GatedMLP(spec.hidden_size, spec.mlp.intermediate_size, dtype=torch.float32)
    for p in mlp.parameters():
        torch.nn.init.normal_(p, std=0.2)
    if int8 and not (mlp.gate_up_proj.quantize() and mlp.down_proj.quantize()):
        pytest.skip("no int8 kernel here")
    x = torch.randn(53, spec.hidden_size)
    calls = []
    rows = mlp.rows
    monkeypatch.setattr(mlp, "rows", lambda part: calls.append(part.shape[0]) or rows(part))
    with torch.no_grad():
        whole = mlp(x)
        monkeypatch.setattr(mlp_module, "MLP_ROWS", 16)
        chunked = mlp(x)
    assert calls == [53, 16, 16, 16, 5]
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)
