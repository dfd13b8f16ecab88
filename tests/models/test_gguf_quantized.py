"""``quantization="gguf"``: a GGUF file's Q8_0 / Q4_0 / Q4_1 tensors kept in their blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tandem.core.gguf.export import exported
from tandem.core.gguf.file import GGUFFile
from tandem.core.testing import make_model
from tandem.core.testing.gguf_writer import write_gguf

ROPE = {"rope_type": "default", "rope_theta": 10000.0}
# the projections in 4 bits (both kinds), the head and the embedding in 8; the parts of a
# fused module (q, k, v; gate, up) share a format
QTYPES = {"q_proj.weight": 3, "k_proj.weight": 3, "v_proj.weight": 3, "o_proj.weight": 2}
QTYPES |= {"mlp.gate_proj.weight": 2, "mlp.up_proj.weight": 2, "mlp.down_proj.weight": 3}
QTYPES |= {"embed_tokens.weight": 8, "lm_head.weight": 8}
QKV_DOWN_Q8 = {f"{n}.weight": 8 for n in ("q_proj", "k_proj", "v_proj", "down_proj")}


@pytest.fixture(scope="module")
def quant_gguf(tmp_path_factory):
    src = make_model(size="tiny", arch="llama", rope_parameters=ROPE)
    return write_gguf(src, tmp_path_factory.mktemp("qgguf") / "tiny-q.gguf", QTYPES)


def test_blocks_are_kept_and_match_the_float_model(quant_gguf, tmp_path, monkeypatch) -> None:
    from tandem.core.engine.loader import load_model
    from tandem.core.layers.linear import Linear
    from tandem.core.layers.weight_form import GgufBlocks

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    kept = load_model(str(quant_gguf), dtype=torch.float32, quantization="gguf")
    floats = load_model(str(quant_gguf), dtype=torch.float32)  # the same file, dequantized
    linears = [m for m in kept.modules() if isinstance(m, Linear)]
    assert linears and all(isinstance(m.form, GgufBlocks) and m.weight is None for m in linears)
    assert kept.model.embed_tokens.form.blocks.name == "Q8_0"
    assert {m.form.blocks.name for m in linears} == {"Q4_0", "Q4_1", "Q8_0"}
    # only the norms stay in floats
    assert sum(p.numel() for p in kept.parameters()) < 0.05 * sum(
        p.numel() for p in floats.parameters()
    )
    h = torch.randn(5, kept.spec.hidden_size, generator=torch.Generator().manual_seed(0))
    a, b = kept.compute_logits(h), floats.compute_logits(h)
    assert (a - b).norm() / b.norm() < 0.02  # only the activations' int8 rounding differs
    ids = torch.tensor([3, 7, 300])
    torch.testing.assert_close(kept.model.embed_tokens(ids), floats.model.embed_tokens(ids))


def test_a_gguf_path_defaults_to_as_stored_and_engines_agree(
    quant_gguf, tmp_path, monkeypatch
) -> None:
    from tandem.core import LLM, SamplingParams
    from tandem.core.config.engine_args import EngineArgs

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    assert EngineArgs(model=str(quant_gguf)).create_config().quantization == "gguf"
    root = str(exported(quant_gguf))
    assert EngineArgs(model=root).create_config().quantization is None
    with pytest.raises(ValueError, match=r"needs a model read from a \.gguf file"):
        EngineArgs(model=root, quantization="gguf").create_config()  # a directory: floats
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    outs = []
    for engine in ("v0", "v1"):
        with LLM(model=str(quant_gguf), engine=engine, max_model_len=64) as llm:
            outs.append(llm.generate(["one two three", "Item 3"], params, use_tqdm=False))
    assert [o.outputs[0].token_ids for o in outs[0]] == [o.outputs[0].token_ids for o in outs[1]]


def test_gguf_needs_a_gguf_model(tiny_model) -> None:
    from tandem.core.config.engine_args import EngineArgs

    with pytest.raises(ValueError, match=r"quantization='gguf' needs a model read from a \.gguf"):
        EngineArgs(model=str(tiny_model), quantization="gguf").create_config()


@pytest.mark.slow
def test_smollm2_as_stored_agrees_with_fp32(smollm2_gguf, smollm2) -> None:
    """Teacher-forced on the float32 model's greedy continuations (the same Q4_1 file,
    dequantized): the blocks as stored pick fp32's token at >= 95% of the positions (96.9%
    measured: the activations' int8 rounding flips near-ties, as int8 does)."""
    from tandem.core import LLM, SamplingParams

    prompts = [
        "The capital of France is",
        "def add(a, b):",
        "The three primary colors are",
        "Once upon a time, in a small village,",
        "To make a cup of tea, first",
        "SELECT name FROM users WHERE",
        "Photosynthesis is the process by which",
        "The speed of light is approximately",
    ]
    greedy = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    with LLM(model=smollm2, engine="v0", max_model_len=256) as llm:
        refs = llm.generate(prompts, greedy, use_tqdm=False)
    forced = [{"prompt_token_ids": r.prompt_token_ids + r.outputs[0].token_ids} for r in refs]
    score = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
    with LLM(model=str(smollm2_gguf), engine="v0", max_model_len=256) as llm:
        assert llm.config.quantization == "gguf"
        scored = llm.generate(forced, score, use_tqdm=False)
    agree = [
        q.prompt_logprobs[len(r.prompt_token_ids) + j][tok].rank == 1
        for r, q in zip(refs, scored)
        for j, tok in enumerate(r.outputs[0].token_ids)
    ]
    agreement = sum(agree) / len(agree)
    print(f"gguf as stored vs fp32: top-1 agreement {agreement:.3f} on {len(agree)} positions")
    assert agreement >= 0.95, agreement


def test_kept_weights_are_the_files_own_bytes(tmp_path) -> None:
    """A module stored in one piece whose rows need no reordering is used from the map."""
    from tandem.core.engine.loader import load_model

    src = make_model(size="tiny", arch="llama", rope_parameters=ROPE)
    path = write_gguf(src, tmp_path / "q.gguf", QKV_DOWN_Q8)
    model = load_model(str(path), dtype=torch.float32, quantization="gguf")
    down = model.model.layers[0].mlp.down_proj.form.blocks
    mapped = GGUFFile(path).data("blk.0.ffn_down.weight")
    assert np.array_equal(down.data.numpy(), mapped)
    address = down.data.data_ptr()  # it lies in a mapping of the file itself
    maps = Path("/proc/self/maps").read_text().splitlines()
    backed = [line for line in maps if line.endswith(str(path))]
    spans = [tuple(int(x, 16) for x in line.split()[0].split("-")) for line in backed]
    assert any(lo <= address < hi for lo, hi in spans), hex(address)
    q = model.model.layers[0].self_attn.qkv_proj  # rows reordered: copied once
    assert not any(lo <= q.form.blocks.data.data_ptr() < hi for lo, hi in spans)
