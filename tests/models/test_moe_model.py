"""Mixture-of-experts models: which layers are sparse, the CPU paths of the experts, and
int8 covering the expert weights (their parity with transformers: test_arch_parity.py)."""

from __future__ import annotations

import pytest
import torch

from tandem.core.engine.loader import load_model
from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.layers.mlp import GatedMLP
from tandem.core.layers.moe import SparseMoE
from tandem.core.layers.weight_form import Int8
from tandem.core.testing import make_model
from tandem.kernels.ops.linear_int8 import int8_available


def logits(model: torch.nn.Module, paged_runner, seed: int = 0, n: int = 40) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    seq = torch.randint(4, 512, (n,), generator=gen).tolist()
    return paged_runner(model).step([(0, seq)])


@pytest.mark.parametrize(
    ("arch", "kinds"),
    [
        ("mixtral", (SparseMoE, SparseMoE)),
        ("qwen2_moe", (GatedMLP, SparseMoE)),  # decoder_sparse_step 2
        ("qwen3_moe", (GatedMLP, SparseMoE)),  # mlp_only_layers [0]
    ],
)
def test_sparse_layers_follow_the_config(arch, kinds):
    model = load_model(make_model(arch=arch))
    assert tuple(type(layer.mlp) for layer in model.model.layers) == kinds
    moe = model.model.layers[1].mlp
    assert (moe.shared_expert is not None) == (arch == "qwen2_moe")
    if arch == "mixtral":  # the factory ties experts 0 and 1 in the router
        assert torch.equal(moe.gate.weight[0], moe.gate.weight[1])


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe"])
def test_packed_experts_equal_the_op(arch, paged_runner):
    """The CPU path on packed weights and ``tandem::torch_fused_moe`` (plain F.linear)."""
    path = make_model(arch=arch)
    packed = logits(load_model(path), paged_runner)
    plain = logits(load_model(path, kernels=resolve_kernels(linear="torch")), paged_runner)
    torch.testing.assert_close(packed, plain, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not int8_available(), reason="torch has no int8 matmul here")
@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "qwen3_moe"])
def test_int8_covers_the_expert_weights(arch, paged_runner):
    path = make_model(arch=arch)
    fp32, int8 = load_model(path), load_model(path, quantization="int8")
    moe = int8.model.layers[1].mlp
    assert moe.experts.int8 is not None and len(moe.experts.int8) == moe.experts.num_experts
    if moe.shared_expert is not None:
        assert isinstance(moe.shared_expert.gate_up_proj.form, Int8)
    assert not isinstance(moe.gate.form, Int8)  # the router stays in fp32: it picks the experts
    a, b = logits(fp32, paged_runner), logits(int8, paged_runner)
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    assert agree >= 0.85, f"int8 greedy agreement {agree:.2f} < 0.85"
