"""How the public wrappers call the ops: straight in eager mode, as ops when traced."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tandem.kernels import ops
from tandem.kernels.ops import library


def _silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return F.silu(x[..., :half]) * x[..., half:]


def test_eager_calls_skip_the_dispatcher(monkeypatch) -> None:
    dispatched = []
    monkeypatch.setattr(torch.ops.tandem, "torch_silu_and_mul", lambda *a: dispatched.append(a))
    x = torch.randn(3, 16)
    torch.testing.assert_close(ops.silu_and_mul(x), _silu_and_mul_reference(x))
    assert dispatched == []  # the function ran, not the op


def test_the_profiler_sees_an_eager_call_under_the_op_name() -> None:
    x = torch.randn(3, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ops.silu_and_mul(x)
    assert "tandem::torch_silu_and_mul" in {event.name for event in prof.events()}


def test_torch_compile_traces_the_op_not_its_body() -> None:
    graphs = []

    def capture(gm: torch.fx.GraphModule, example_inputs):  # a dynamo backend
        graphs.append(gm)
        return gm.forward

    @torch.compile(backend=capture, fullgraph=True)
    def mlp_act(x: torch.Tensor) -> torch.Tensor:
        return ops.silu_and_mul(x) * 2.0

    x = torch.randn(4, 32)
    torch.testing.assert_close(mlp_act(x), _silu_and_mul_reference(x) * 2.0)
    targets = {str(node.target) for gm in graphs for node in gm.graph.nodes}
    assert "tandem.torch_silu_and_mul" in {t.removesuffix(".default") for t in targets}, targets


def test_an_unknown_op_name_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        library.call("torch_no_such_op")
