"""An engine's model keeps each weight once: the float tensors a checkpoint was read into
are freed where the kernel's copy holds all of them (fp32 panels, int8, GGUF blocks), and
the model then gives the same logits, bit for bit, as one that kept both."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.engine.loader import iterate_weights, load_model, weight_files
from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.layers.linear import Linear
from tandem.core.layers.weight_form import Dense, Int8, Panels
from tandem.core.models.plan import make_plan
from tandem.core.testing import make_model
from tandem.kernels.native import decode_stack as native
from tandem.kernels.native import linear_f32
from tandem.kernels.ops.linear_int8 import int8_available

needs_c = pytest.mark.skipif(not linear_f32.available(), reason="no C fp32 kernel here")


def _packed(w: torch.Tensor) -> Dense:
    form = Dense({"weight": w})
    form.prepare()
    return form


@needs_c
@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 24),
    n=st.integers(1, 70),
    k=st.integers(1, 80),
    bias=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_panels_multiply_and_look_up_as_the_weight_they_were_packed_from(m, n, k, bias, seed):
    g = torch.Generator().manual_seed(seed)
    w, x, b = torch.randn(n, k, generator=g), torch.randn(m, k, generator=g), torch.randn(n)
    b = b if bias else None
    dense = _packed(w)
    alone = dense.standalone()
    assert isinstance(alone, Panels) and alone.shape == (n, k) and alone.name == "float32"
    assert torch.equal(alone.matmul(x, b), dense.matmul(x, b))  # the same kernel, same panels
    assert torch.equal(alone.weight(), w)
    ids = torch.randint(0, n, (m,), generator=g)
    assert torch.equal(alone.rows(ids), w[ids])
    # a call the C kernel does not take (bf16 x) multiplies the weight read back
    got = alone.matmul(x.bfloat16(), None if b is None else b.bfloat16())
    want = F.linear(x.bfloat16(), w.bfloat16(), None if b is None else b.bfloat16())
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    # the C stack's entry points at the same panels
    keep: list[torch.Tensor] = []
    entry = alone.c_entry(None, keep)
    assert isinstance(entry, native.LinSpec)
    assert entry.weights[0].data_ptr() == dense.pack.get(w).panels.data_ptr()


@needs_c
def test_panels_refuse_what_they_cannot_do():
    alone = _packed(torch.randn(20, 8)).standalone()
    with pytest.raises(IndexError, match=r"ids must be in \[0, 20\), got 3\.\.20"):
        alone.rows(torch.tensor([3, 20]))
    with pytest.raises(IndexError, match=r"got -1\.\.2"):
        alone.rows(torch.tensor([-1, 2]))
    alone.use_kernel("native")  # its own kernel: nothing to do
    with pytest.raises(ValueError, match="kernel 'torch': this weight is kept in the native"):
        alone.use_kernel("torch")
    assert alone.moved() is alone and alone.standalone() is alone


def test_a_weight_not_packed_for_the_c_kernel_has_no_standalone_form():
    w = torch.randn(32, 16)
    assert Dense({"weight": w}).standalone() is None  # not packed yet
    for kernel in ("torch", "onednn"):
        form = Dense({"weight": w})
        form.use_kernel(kernel)
        form.prepare()
        assert form.standalone() is None
    assert _packed(w.bfloat16()).standalone() is None
    assert _packed(torch.randn(32, 0)).standalone() is None  # K = 0: no panel to read


@pytest.mark.skipif(not int8_available(), reason="torch has no int8 matmul here")
def test_int8_lets_go_of_the_dense_weight_it_was_made_from():
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(48, 64, generator=g), torch.randn(5, 64, generator=g)
    int8 = Dense({"weight": w}).quantized()
    assert isinstance(int8, Int8) and int8.dense is not None
    alone = int8.standalone()
    assert alone.dense is None and alone.weight is int8.weight
    assert torch.equal(alone.matmul(x), int8.matmul(x))
    assert alone.standalone() is alone and alone.moved() is alone and alone.quantized() is alone
    alone.use_kernel("torch")  # no dense weight to hand it to: nothing changes
    with pytest.raises(ValueError, match="int8 weight runs on the CPU alone, got x on meta"):
        alone.matmul(torch.empty(5, 64, device="meta"))


@needs_c
@pytest.mark.skipif(not int8_available(), reason="torch has no int8 matmul here")
def test_panels_quantize_as_the_dense_weight_does():
    w, x = torch.randn(40, 32), torch.randn(3, 32)
    dense = _packed(w)
    got, want = dense.standalone().quantized(), dense.quantized()
    assert isinstance(got, Int8) and got.dense is None
    assert torch.equal(got.matmul(x), want.matmul(x))


def _logits(model: torch.nn.Module, paged_runner) -> list[torch.Tensor]:
    runner = paged_runner(model)
    steps = [runner.step([(0, [5, 9, 2, 7]), (1, [7, 1])])]
    steps += [runner.step([(0, [3]), (1, [4])]) for _ in range(3)]
    return steps


def _float_bytes(model: torch.nn.Module) -> int:
    return sum(p.nbytes for p in model.parameters())


CASES = [
    ("llama", None),  # untied head
    ("qwen2", None),  # tied: the table's rows read from the head's panels
    ("gemma3", None),  # tied, scaled embedding, soft-capped logits
    ("qwen3_moe", None),  # stacked experts
    ("deepseek_v3", None),  # latent attention (its kv_b read whole: kept) and experts
    ("llama", "int8"),
    ("qwen2", "int8"),  # tied: the table kept in floats for its rows, the head in int8
]


@needs_c
@pytest.mark.parametrize(("arch", "quantization"), CASES, ids=[f"{a}-{q}" for a, q in CASES])
def test_a_model_with_its_floats_freed_gives_the_same_logits(arch, quantization, paged_runner):
    if quantization and not int8_available():
        pytest.skip("torch has no int8 matmul here")
    path = str(make_model(size="tiny", arch=arch))
    kernels = resolve_kernels()
    kept = load_model(path, dtype=torch.float32, quantization=quantization, kernels=kernels)
    freed = load_model(
        path, dtype=torch.float32, quantization=quantization, kernels=kernels, free_float=True
    )
    assert _float_bytes(freed) < _float_bytes(kept) / 2
    for module in freed.modules():
        if isinstance(module, Linear) and module.weight is None:
            assert isinstance(module.form, (Panels, Int8))
        if isinstance(getattr(module, "form", None), (Panels, Int8)):
            assert module.weight is None  # never both
    assert make_plan(freed, "cpu").table() == make_plan(kept, "cpu").table()
    for got, want in zip(_logits(freed, paged_runner), _logits(kept, paged_runner)):
        assert torch.equal(got, want)


@needs_c
def test_a_freed_model_refuses_another_kernel_and_a_reload_and_free_float_needs_kernels():
    path = str(make_model(size="tiny", arch="llama"))
    with pytest.raises(ValueError, match="free_float needs the engine's kernels"):
        load_model(path, free_float=True)
    model = load_model(path, dtype=torch.float32, kernels=resolve_kernels(), free_float=True)
    assert model.floats_freed > 0
    with pytest.raises(ValueError, match="kernel 'torch'"):
        model.use_kernels(resolve_kernels(linear="torch"))
    with pytest.raises(ValueError, match="float weights were freed at load"):
        model.load_weights(iterate_weights(weight_files(path)))


@needs_c
def test_the_engine_loads_its_model_with_the_floats_freed():
    from tandem.core import LLM, SamplingParams

    path = str(make_model(size="tiny", arch="qwen2"))
    with LLM(path, engine="v0") as llm:
        model = llm.engine.runner.model
        assert model.model.embed_tokens.weight is None  # tied: the head's panels alone
        assert isinstance(model.model.embed_tokens.form, Panels)
        assert isinstance(model.model.layers[0].mlp.gate_up_proj.form, Panels)
        out = llm.generate(["hello world"], SamplingParams(max_tokens=6, temperature=0.0))
    assert len(out[0].outputs[0].token_ids) == 6
