"""The C decode stack on each weight form: GGUF blocks in 16, 3 and 2 bits (stacked
formats), fp32 and int8 weights give the modules' tokens and logits bit for bit; a form
the C kernels do not take leaves the stack to the modules; the table is made again when
what it points at changes."""

from __future__ import annotations

import pytest
import torch

from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.layers.weight_form import Int8
from tandem.core.models import decode_stack, stack_table
from tandem.core.testing import make_model
from tandem.kernels import native

from .test_decode_stack import ROPE, _same_as_modules

pytestmark = pytest.mark.skipif(not decode_stack.native.available(), reason="no C kernels here")


def _keep_as(model: torch.nn.Module, first: int, second: int) -> None:
    """Every linear layer of the stack in GGUF format ``first`` or ``second``, as a loader
    keeps them: q, k in ``first`` and v in ``second`` (a stack), gate/up in ``first``, o and
    down in ``second``; no float weight left."""
    from tandem.kernels.gguf_blocks import QuantStack, quantize

    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        h, kvh, d = attn.shape
        w = attn.qkv_proj.weight.detach()
        qk = quantize(w[: (h + kvh) * d], first)
        attn.qkv_proj.use_quantized(QuantStack((qk, quantize(w[(h + kvh) * d :], second))))
        mlp.gate_up_proj.use_quantized(quantize(mlp.gate_up_proj.weight.detach(), first))
        for lin in (attn.o_proj, mlp.down_proj):
            lin.use_quantized(quantize(lin.weight.detach(), second))
        for lin in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj):
            lin.register_parameter("weight", None)
    model.model.decode_stack.drop()


@pytest.mark.parametrize("formats", [(1, 30), (10, 11)], ids=["F16+BF16", "Q2_K+Q3_K"])
def test_16_bit_and_low_bit_weights_match_the_modules(formats, paged_runner, stack_ran):
    """F16 / BF16 rows (x kept in fp32) and the 2- and 3-bit K-quants run in the C stack,
    logits bit for bit the modules', at decode and in a short prefill-only step."""
    from tandem.core.engine.loader import load_model

    shape = {"hidden_size": 256, "intermediate_size": 512, "rope_parameters": ROPE}
    model = load_model(str(make_model(size="tiny", arch="llama", **shape)), dtype=torch.float32)
    _keep_as(model, *formats)
    ran = stack_ran
    logits = {}
    for mode in ("modules", "c"):
        model.use_kernels(resolve_kernels(decode_stack=mode))  # a model of its own
        runner = paged_runner(model)
        steps = [runner.step([(0, [5, 9, 2]), (1, [7, 1])])]
        steps += [runner.step([(0, [3]), (1, [4])]) for _ in range(3)]
        logits[mode] = steps
    assert sum(ran) == 4  # the C stack took every step of the second pass
    for got, want in zip(logits["c"], logits["modules"]):
        assert torch.equal(got, want)


def test_a_format_without_a_c_kernel_runs_the_modules(monkeypatch):
    """A weight in a format the C kernels lack (none today: one is made up here) leaves the
    stack to the modules rather than to a kernel that would refuse it mid-step."""
    from tandem.core.engine.loader import load_model

    shape = {"hidden_size": 256, "intermediate_size": 512, "rope_parameters": ROPE}
    model = load_model(str(make_model(size="tiny", arch="llama", **shape)), dtype=torch.float32)
    _keep_as(model, 12, 11)
    spec = model.spec.attention
    kv = (4, 16, spec.num_kv_heads, spec.head_dim)
    caches = [(torch.zeros(kv), torch.zeros(kv)) for _ in range(model.spec.num_layers)]
    stack = model.model.decode_stack
    monkeypatch.setattr(stack_table, "supports", lambda qtype: qtype != 11)
    assert stack._table_for(caches) is None and not stack.usable
    monkeypatch.undo()
    stack.usable = True
    assert stack._table_for(caches) is not None


@pytest.mark.skipif(not native.linear_f32.available(), reason="no C fp32 linear kernel here")
def test_fp32_weights_match_the_modules(tiny_model, monkeypatch):
    _same_as_modules(str(tiny_model), monkeypatch, dtype="float32")


@pytest.mark.skipif(not native.linear_i8.available(), reason="no C int8 linear kernel here")
@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2"])  # qwen2: biased fp32 qkv
def test_int8_weights_match_the_modules(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    model = str(make_model(size="tiny", arch=arch))
    _same_as_modules(model, monkeypatch, dtype="float32", quantization="int8")


def test_int8_weights_without_the_c_kernel_run_the_modules(tmp_path, monkeypatch):
    """Where the CPU has no int8 kernel (torch's int8 matmul runs) the stack is left to
    the modules."""
    from tandem.core.engine.loader import load_model

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    int8 = load_model(str(make_model(size="tiny", arch="llama")), dtype=torch.float32)
    int8.quantize("int8")
    lins = [m for m in int8.model.layers.modules() if isinstance(getattr(m, "form", None), Int8)]
    assert lins
    for lin in lins:
        lin.form.weight = lin.form.weight.on_torch()
    spec = int8.spec.attention
    shape = (4, 16, spec.num_kv_heads, spec.head_dim)
    caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(int8.spec.num_layers)]
    stack = int8.model.decode_stack
    assert stack.usable  # the structure fits; the int8 layers do not
    assert stack._table_for(caches) is None and not stack.usable


@pytest.mark.skipif(not native.linear_f32.available(), reason="no C fp32 linear kernel here")
def test_the_table_is_made_again_when_what_it_points_at_changes(tiny_model):
    from tandem.core.engine.loader import load_model

    model = load_model(str(tiny_model), dtype=torch.float32)
    spec = model.spec.attention
    shape = (4, 16, spec.num_kv_heads, spec.head_dim)

    def caches():
        return [(torch.zeros(shape), torch.zeros(shape)) for _ in range(model.spec.num_layers)]

    stack, kv = model.model.decode_stack, caches()
    table = stack._table_for(kv)
    assert table is not None and stack._table_for(kv) is table  # nothing changed: kept
    norm = model.model.layers[1].post_attention_layernorm
    norm.weight = torch.nn.Parameter(norm.weight.detach() * 2, requires_grad=False)
    again = stack._table_for(kv)
    assert again is not None and again is not table  # a norm's new weight
    assert stack._table_for(caches()) is not again  # new caches
