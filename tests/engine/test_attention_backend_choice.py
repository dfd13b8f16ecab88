"""The attention backend an engine runs follows ``TANDEM_ATTENTION_BACKEND`` on both
engines, v1's core process included (it reports its choice in its Ready message)."""

from __future__ import annotations

import pytest

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.layers.attention_backend import available_attention_backends
from tandem.core.testing import run_to_completion

pytestmark = pytest.mark.engines("v0", "v1")

GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def check(eng, expected: str) -> None:
    assert eng.attention_backend == expected
    out = run_to_completion(eng, [("a", [1, 40, 41], GREEDY)])["a"]
    assert len(out.outputs[0].token_ids) == 4
    model = getattr(getattr(eng, "runner", None), "model", None)  # v0: in this process
    if model is not None:
        assert model.attention_backend == expected


def test_the_variable_forces_the_torch_backend(new_engine, monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "torch")
    check(new_engine(), "torch")


def test_the_default_is_the_c_backend_where_it_builds(new_engine, monkeypatch) -> None:
    monkeypatch.delenv("TANDEM_ATTENTION_BACKEND", raising=False)
    expected = "cpu" if "cpu" in available_attention_backends("cpu") else "torch"
    check(new_engine(), expected)


def test_engine_args_choose_the_kernels_and_the_plan_says_so(new_engine, monkeypatch) -> None:
    """An ``EngineArgs`` switch wins over its variable; the plan the model's process made
    reaches the front (v1: through the core's Ready message) and names every choice."""
    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "cpu")
    eng = new_engine(attention_backend="torch", cpu_linear="torch", decode_stack="modules")
    check(eng, "torch")
    plan = eng.plan.splitlines()
    assert "attention     torch" in plan and "linear        torch" in plan
    assert "decode        modules: decode_stack='modules'" in plan
    assert any(line.startswith("layers 0-1    norm > qkv") for line in plan)


def test_the_default_plan_runs_decode_steps_in_c(new_engine, monkeypatch) -> None:
    for name in ("TANDEM_ATTENTION_BACKEND", "TANDEM_CPU_LINEAR", "TANDEM_DECODE_STACK"):
        monkeypatch.delenv(name, raising=False)
    if "cpu" not in available_attention_backends("cpu"):
        pytest.skip("the C kernels do not build here")
    assert "decode        c: all 2 layers in one call" in new_engine().plan.splitlines()


@pytest.mark.parametrize(
    ("field", "value"),
    [("attention_backend", "xformers"), ("cpu_linear", "mkl"), ("decode_stack", "fused")],
)
def test_a_bad_switch_names_the_field(field, value) -> None:
    from tandem.core.config.engine_args import EngineArgs

    with pytest.raises(ValueError, match=f"{field} must be one of .* or None, got '{value}'"):
        EngineArgs(model="tiny", **{field: value})
