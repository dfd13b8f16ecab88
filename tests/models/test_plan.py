"""The execution plan: what a loaded model runs, said from its spec, weights and kernels.

Every architecture's plan names the ops its spec asks for (norm placements, q/k norms,
windows, soft-capping, scalars, experts, latent attention) and, where the C decode
stack cannot run it, the reason; the kernels it names are the ones the model runs.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tandem.core.engine.loader import load_model
from tandem.core.layers.attention_backend import for_device
from tandem.core.layers.kernel_choice import KernelChoice, resolve_kernels
from tandem.core.models.plan import ExecutionPlan, make_plan, runs
from tandem.core.testing import make_model
from tandem.kernels.native import decode_stack as native

# per architecture: text every layer's program holds, text one layer's holds, why the
# modules run decode steps (None: the C stack does), and the ends
CASES = {
    "llama": ("norm > qkv > rope (llama3) > attend > o > add > norm > gate_up", "", None),
    "gemma2": ("gelu*mul > down > norm > add", "attend (window 8) softcap 1.5", None),
    "gemma3": ("q/k norm (head)", "rope (linear)", None),
    "qwen3": ("q/k norm (head) > rope > attend", "", None),
    "olmo2": ("qkv > q/k norm (proj) > rope > attend > o > norm > add", "", None),
    "phi3": ("rope (longrope) > attend (window 10)", "", None),
    "granite": ("qkv+bias > rope > attend > o+bias > x0.35 > add", "", None),
    "mixtral": ("route (softmax top-2 of 4) > experts (gate_up > silu*mul > down)", "", None),
    "qwen2_moe": ("norm > qkv+bias", "+ shared expert", None),
    "deepseek_v3": ("latent q/kv > rope (yarn)", "route (sigmoid top-3 of 8)", None),
}

# what the C stack's note says it runs beyond the Llama layer
PROGRAMS = {
    "gemma2": "(sandwich norms, gelu_tanh gate, sliding windows, soft-capped scores)",
    "gemma3": "(sandwich norms, q/k norms (head), gelu_tanh gate, 2 rope tables, sliding windows)",
    "qwen3": "(q/k norms (head))",
    "olmo2": "(post norms, q/k norms (proj))",
    "granite": "(residual x0.35)",
    "phi3": "(rotary 0.75 of each head, sliding windows)",
    "mixtral": "(experts (softmax top-2 of 4, renormalised), sliding windows)",
    "qwen2_moe": "(experts (softmax top-2 of 6, gated shared expert))",
    "deepseek_v3": (
        "(experts (sigmoid top-3 of 8 in the 2 best of 4 groups, renormalised, x2.5, shared "
        "expert), latent attention)"
    ),
}


@pytest.fixture(scope="module")
def plans() -> dict[str, ExecutionPlan]:
    out = {}
    for arch in CASES:
        model = load_model(make_model(arch=arch), kernels=resolve_kernels())
        out[arch] = make_plan(model, "cpu")
    return out


@pytest.mark.parametrize("arch", list(CASES))
def test_each_architecture_says_what_it_runs(plans, arch, monkeypatch):
    every, some, why_not = CASES[arch]
    plan = plans[arch]
    assert all(every in layer for layer in plan.layers), plan.table()
    assert not some or any(some in layer for layer in plan.layers), plan.table()
    if not native.available():
        assert plan.decode == "modules"
    elif why_not is None:
        assert plan.decode == "c" and plan.decode_note.startswith("all 2 layers in one call")
        assert plan.decode_note.endswith(PROGRAMS.get(arch, "call")), plan.decode_note
    else:
        assert plan.decode == "modules" and why_not in plan.decode_note, plan.decode_note
    table = plan.table().splitlines()
    assert table[0].split() == ["architecture", plan.architecture]
    assert f"decode        {plan.decode}: {plan.decode_note}" in table
    assert plan.line().startswith(f"{plan.architecture} on cpu: attention ")


def test_the_ends_carry_the_scalars(plans):
    assert plans["llama"].ends == ("embed", "norm > logits")
    first, last = plans["gemma2"].ends
    assert first.startswith("embed > x") and "softcap" in last
    assert plans["granite"].ends[1].startswith("norm > logits") and "/" in plans["granite"].ends[1]


def test_weight_forms_count_every_matrix(plans):
    # llama tiny: 2 layers x (qkv, o, gate_up, down), the embedding, an untied head
    assert dict(plans["llama"].weights) == {"float32": 10}
    assert sum(n for _, n in plans["mixtral"].weights) > 10  # experts counted one by one


def test_runs_join_equal_neighbours_only():
    assert runs(("a", "a", "b", "a")) == [(0, 1, "a"), (2, 2, "b"), (3, 3, "a")]
    assert runs(()) == []


def test_a_kernel_switch_changes_the_plan_and_the_model(plans):
    model = load_model(make_model(arch="llama"), kernels=resolve_kernels(linear="torch"))
    plan = make_plan(model, "cpu")
    assert plan.kernels.linear == "torch"
    if native.available():  # no packed fp32 copy: the C stack cannot take the layers
        assert plan.decode == "modules" and "float32 on the torch kernel" in plan.decode_note
    model = load_model(make_model(arch="llama"), kernels=resolve_kernels(decode_stack="modules"))
    assert make_plan(model, "cpu").decode_note == "decode_stack='modules'"


def test_a_plan_needs_kernels():
    model = load_model(make_model(arch="llama"))
    with pytest.raises(ValueError, match="make_plan needs a model given its kernels"):
        make_plan(model, "cpu")


def test_bad_kernel_choices_name_the_field():
    with pytest.raises(ValueError, match="linear must be one of native, onednn, torch"):
        KernelChoice(linear="mkl")
    with pytest.raises(ValueError, match="attention backend 'flash_attn' is not available"):
        for_device(KernelChoice(attention="flash_attn"), "cpu")


def test_tandem_explain_prints_the_plan(capsys, tiny_model):
    from tandem.core.cli import main

    assert main(["explain", str(tiny_model), "--engine", "v0", "--cpu-linear", "torch"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "linear        torch" in out
    assert any(line.startswith("layers 0-1    norm > qkv") for line in out)


def test_the_plan_takes_its_ranks_from_the_parallel_config():
    """A whole model planned for an engine whose ParallelConfig says 2 ranks is refused
    (it would run unsharded); planned for 1, the plan names no ranks."""
    import torch

    from tandem.core.config.parallel import ParallelConfig
    from tandem.core.models.plan import plan_model

    model = load_model(make_model(arch="llama"), kernels=resolve_kernels())
    config = SimpleNamespace(
        kernels=model.kernels, device=torch.device("cpu"), parallel=ParallelConfig(2), plan=None
    )
    with pytest.raises(ValueError, match=r"parallel.tensor_parallel_size is 2, but the model"):
        plan_model(model, config)
    config.parallel = ParallelConfig(1)
    plan = plan_model(model, config)
    assert plan.tensor_parallel == 1 and plan.line().startswith("LlamaForCausalLM on cpu: ")
