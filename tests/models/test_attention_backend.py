"""Attention backend selection: env override, env-keyed cache, availability errors."""

from __future__ import annotations

import pytest
import torch

from tandem.core.attention_backend import (
    available_attention_backends,
    get_attention_backend,
    select_attention_backend,
)


def test_default_on_cpu_is_torch(monkeypatch):
    monkeypatch.delenv("TANDEM_ATTENTION_BACKEND", raising=False)
    assert select_attention_backend("cpu") == "torch"
    assert "flash_attn" not in available_attention_backends("cpu")


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
    with pytest.raises(ValueError, match="attention backend must be one of torch, flash_attn"):
        get_attention_backend("xformers")


def test_model_records_its_backend(tandem_models, paged_runner, monkeypatch):
    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "torch")
    model = tandem_models["llama"]
    paged_runner(model).step([(0, [5, 6, 7])])
    assert model.attention_backend == "torch"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_prefers_flash_attn(monkeypatch):
    monkeypatch.delenv("TANDEM_ATTENTION_BACKEND", raising=False)
    expected = "flash_attn" if "flash_attn" in available_attention_backends("cuda") else "torch"
    assert select_attention_backend("cuda") == expected
