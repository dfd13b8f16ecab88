"""Every architecture from a GGUF file that llama.cpp's own tools wrote (tests/models/gguf_files).

The F32 file is the source checkpoint with llama.cpp's changes (names, metadata, rotary
rows, norm offsets, stacked experts, split latent projections): read back, its tensors are
the checkpoint's, its config gives the same spec, its tokenizer the same ids, and both
engines give the same greedy tokens as the safetensors directory. A quantized preset of the
same source loads kept as stored and follows the dequantized float model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from tandem.core.gguf import open_checkpoint
from tandem.core.testing.gguf_fixtures import gguf_fixture, load_manifest

FIXTURES = Path(__file__).parent / "gguf_files"
FILES = load_manifest(FIXTURES)["files"]
F32 = sorted(n for n, r in FILES.items() if r["format"] == "F32")
QUANTIZED = sorted(n for n, r in FILES.items() if r["format"] != "F32")
# the source's traps llama.cpp cannot carry are left out of these configs (see the manifest)
PROMPTS = ["one two three four", "Item 3: the cat reads", "The 5 small robots"]
GREEDY = {"temperature": 0.0, "max_tokens": 8, "ignore_eos": True}


@pytest.mark.parametrize("name", F32)
def test_the_f32_file_is_its_source_checkpoint(name: str, tmp_path, monkeypatch) -> None:
    from tandem.core.config.model import load_model_config
    from tandem.core.models.architectures import build_spec

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    path, hf_dir = gguf_fixture(FIXTURES, name)
    want = load_file(str(hf_dir / "model.safetensors"))
    got = {t.name: t.floats() for t in open_checkpoint(path).tensors()}
    tied = "lm_head.weight" not in got and "lm_head.weight" in want
    assert set(got) | ({"lm_head.weight"} if tied else set()) == set(want)
    for key, value in got.items():
        expected = want[key][: value.shape[0]] if key.endswith("embed_tokens.weight") else want[key]
        np.testing.assert_allclose(value, expected.astype(np.float32), rtol=0, atol=1e-6)
    ours = load_model_config(path, max_model_len=64)
    theirs = load_model_config(hf_dir, max_model_len=64)
    spec, ref = (build_spec(c.hf_config, c.architecture, 64) for c in (ours, theirs))
    assert spec.attention == ref.attention and len(spec.layers) == len(ref.layers)
    for a, b in zip(spec.layers, ref.layers):
        assert (a.mlp, _window(a.window)) == (b.mlp, _window(b.window))
        _same_rotation(a.rope, b.rope, spec.attention.head_dim)
    assert (spec.mlp, spec.embedding_scale, spec.final_softcap) == (
        ref.mlp,
        ref.embedding_scale,
        ref.final_softcap,
    )


def _window(window: int | None) -> int | None:
    """A window no shorter than the context (64 here) is no window: llama.cpp keeps none
    for Mistral's 4096."""
    return window if window is not None and window < 64 else None


def _same_rotation(a, b, head_dim: int) -> None:
    """The same angles at every position (llama.cpp stores Llama 3's scaling as one divisor
    per frequency, in float32, where the config gives its formula)."""
    import torch

    from tandem.core.layers.rotary import cos_sin_cache

    assert (a.partial, a.attention_factor) == pytest.approx((b.partial, b.attention_factor))
    dim = a.rotary_dim(head_dim)
    torch.testing.assert_close(cos_sin_cache(dim, 64, a), cos_sin_cache(dim, 64, b))


@pytest.mark.parametrize("name", F32)
def test_the_files_tokenizer_gives_the_sources_ids(name: str, tmp_path, monkeypatch) -> None:
    from tandem.core.gguf.tokenizer import tokenizer_dir
    from tandem.core.text.tokenizer import load_tokenizer

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    path, hf_dir = gguf_fixture(FIXTURES, name)
    from tokenizers import Tokenizer

    ours = load_tokenizer(tokenizer_dir(path))
    theirs = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))  # as written, no class's quirks
    for text in PROMPTS:
        assert ours.encode(text) == theirs.encode(text).ids, text
    assert ours.eos_token_id == load_tokenizer(hf_dir).eos_token_id


def _greedy(model: Path, engine: str, prompts: list[list[int]], **kwargs) -> list[list[int]]:
    from tandem.core import LLM, SamplingParams

    with LLM(model=str(model), engine=engine, max_model_len=64, **kwargs) as llm:
        outs = llm.generate(
            [{"prompt_token_ids": p} for p in prompts], SamplingParams(**GREEDY), use_tqdm=False
        )
    return [o.outputs[0].token_ids for o in outs]


def _prompt_ids(hf_dir: Path) -> list[list[int]]:
    from tandem.core.text.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(hf_dir)
    return [tokenizer.encode(p) for p in PROMPTS]


@pytest.mark.engines("v0", "v1")
@pytest.mark.parametrize("name", F32)
def test_engines_run_the_f32_file_as_the_checkpoint(name: str, engine: str) -> None:
    path, hf_dir = gguf_fixture(FIXTURES, name)
    prompts = _prompt_ids(hf_dir)
    assert _greedy(path, engine, prompts) == _greedy(hf_dir, engine, prompts)


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_quantized_preset_is_kept_as_stored_and_follows_its_floats(name: str) -> None:
    """Kept as stored vs the same file dequantized: the logits of a few positions agree to
    the activations' int8 rounding (the kernels' only difference)."""
    import torch

    from tandem.core.engine.loader import load_model

    path, _ = gguf_fixture(FIXTURES, name)
    kept = load_model(str(path), dtype=torch.float32, quantization="gguf")
    floats = load_model(str(path), dtype=torch.float32)
    from tandem.core.layers.weight_form import GgufBlocks

    blocks = [m for m in kept.modules() if isinstance(getattr(m, "form", None), GgufBlocks)]
    assert blocks, "no module was kept in its blocks"
    h = torch.randn(4, kept.spec.hidden_size, generator=torch.Generator().manual_seed(0))
    a, b = kept.compute_logits(h), floats.compute_logits(h)
    assert float((a - b).norm() / b.norm()) < 0.05
