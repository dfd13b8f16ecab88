"""Attention backend selection: env override, env-keyed cache, availability errors."""

from __future__ import annotations

import pytest
import torch

from tandem.core.layers.attention_backend import (
    available_attention_backends,
    get_attention_backend,
    select_attention_backend,
)
from tandem.kernels import native


def test_default_on_cpu_is_the_c_kernels_where_they_build(monkeypatch):
    monkeypatch.delenv("TANDEM_ATTENTION_BACKEND", raising=False)
    expected = "cpu" if native.library() is not None else "torch"
    assert select_attention_backend("cpu") == expected
    assert "flash_attn" not in available_attention_backends("cpu")
    assert "cpu" not in available_attention_backends("cuda")


@pytest.mark.skipif(native.library() is None, reason="no native kernels here")
def test_cpu_and_torch_backends_agree_on_a_model(tandem_models, paged_runner, use_kernels):
    model = tandem_models["llama"]
    chunks = [(0, list(range(4, 30))), (1, list(range(9, 20)))]
    out = {}
    for name in ("torch", "cpu"):
        use_kernels(model, attention=name)
        runner = paged_runner(model)
        runner.step(chunks)
        out[name] = runner.step([(0, [5]), (1, [6])])  # a decode step
        assert model.attention_backend == name
    torch.testing.assert_close(out["cpu"], out["torch"], atol=1e-4, rtol=1e-4)


def test_selection_follows_the_env_var(monkeypatch):
    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "torch")
    assert select_attention_backend("cpu") == "torch"
    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "flash_attn")
    with pytest.raises(ValueError, match="TANDEM_ATTENTION_BACKEND='flash_attn' is not avail"):
        select_attention_backend("cpu")  # a cached 'torch' must not answer for the new value


def test_selection_is_an_env_cache():
    from tandem.core.env_cache import registered_caches

    assert select_attention_backend in registered_caches()
    assert select_attention_backend.var_names == ("TANDEM_ATTENTION_BACKEND",)


def test_bad_names():
    with pytest.raises(TypeError, match="device_type must be"):
        select_attention_backend(None)
    with pytest.raises(ValueError, match="attention backend must be one of torch, cpu, flash_attn"):
        get_attention_backend("xformers")


def test_model_records_its_backend(tandem_models, paged_runner, use_kernels):
    model = tandem_models["llama"]
    use_kernels(model, attention="torch")
    paged_runner(model).step([(0, [5, 6, 7])])
    assert model.attention_backend == "torch"


def test_a_model_keeps_its_kernels_when_the_env_changes(model_dirs, paged_runner, monkeypatch):
    """The env is read once, when the kernels are resolved: a variable flipped later
    (another engine, another test) does not reach a running model."""
    from tandem.core.engine.loader import load_model

    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "torch")
    model = load_model(model_dirs["llama"])
    paged_runner(model).step([(0, [5, 6, 7])])  # no engine: the defaults, at the first step
    assert model.attention_backend == "torch"
    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "flash_attn")  # not even available here
    paged_runner(model).step([(0, [5, 6, 7])])
    assert model.attention_backend == "torch"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_prefers_flash_attn(monkeypatch):
    monkeypatch.delenv("TANDEM_ATTENTION_BACKEND", raising=False)
    expected = "flash_attn" if "flash_attn" in available_attention_backends("cuda") else "torch"
    assert select_attention_backend("cuda") == expected
