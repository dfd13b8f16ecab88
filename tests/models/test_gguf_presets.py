"""The GGUF presets people pick, as llama.cpp writes them, run as stored (tests/models/gguf_files).

One source (``llama-presets``: rows of 256, tied embeddings) in Q2_K, Q3_K_M, Q4_K_M, Q5_K_M,
Q6_K, Q8_0 and Q4_0 from llama.cpp's quantizer and F16 / BF16 from its converter. Read with
``quantization="gguf"`` (a .gguf file's default), every linear layer and the embedding keep
the file's own format, tensor by tensor. The 16-bit files are the dequantized model up to
fp32 sum order: the same logits and greedy tokens. A block preset follows the same file
dequantized to the activations' int8 rounding, and both engines make the greedy tokens of a
plain forward pass over the kept weights.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch

from tandem.core.gguf import open_checkpoint
from tandem.core.testing.gguf_fixtures import load_manifest
from tandem.kernels.gguf_blocks import FORMATS

FIXTURES = Path(__file__).parent / "gguf_files"
FILES = load_manifest(FIXTURES)["files"]
PRESETS = sorted(n for n, r in FILES.items() if r["source"] == "llama-presets")
HALF = [n for n in PRESETS if FILES[n]["format"] in ("F16", "BF16")]
BLOCKS = [n for n in PRESETS if n not in HALF]
PROMPTS = [[1, 17, 250, 33, 9, 120], [1, 300, 4], [1, 64, 65, 66, 67, 68, 69, 70, 71, 72]]
NEW_TOKENS = 8
# a module kept as one weight of several file tensors, in this order
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def test_every_preset_is_committed_with_the_formats_it_names() -> None:
    formats = {FILES[n]["format"]: set(FILES[n]["tensor_types"]) - {"F32"} for n in PRESETS}
    assert formats == {
        "Q2_K": {"Q2_K", "Q3_K", "Q6_K"},
        "Q3_K_M": {"Q3_K", "Q4_K", "Q5_K", "Q6_K"},
        "Q4_K_M": {"Q4_K", "Q6_K"},
        "Q5_K_M": {"Q5_K", "Q6_K"},
        "Q6_K": {"Q6_K"},
        "Q8_0": {"Q8_0"},
        "Q4_0": {"Q4_0", "Q6_K"},  # llama.cpp keeps the (tied) output table in Q6_K
        "F16": {"F16"},
        "BF16": {"BF16"},
    }


@cache
def _model(name: str, kept: bool) -> torch.nn.Module:
    from tandem.core.engine.loader import load_model

    quantization = "gguf" if kept else None  # None: the file dequantized to float32
    return load_model(str(FIXTURES / name), dtype=torch.float32, quantization=quantization)


def _stored_format(stored: dict[str, int], module: str) -> str:
    """The format a module must keep: its file tensors' formats, runs of one joined."""
    prefix, _, leaf = module.rpartition(".")
    names = [f"{prefix}.{part}.weight" for part in FUSED.get(leaf, (leaf,))]
    formats = [FORMATS[stored[n]][0] for n in names]
    return "+".join(f for i, f in enumerate(formats) if i == 0 or f != formats[i - 1])


@pytest.mark.parametrize("name", PRESETS)
def test_every_weight_is_kept_in_the_files_format(name: str) -> None:
    from tandem.core.layers.linear import Linear
    from tandem.core.layers.weight_form import GgufBlocks

    model = _model(name, kept=True)
    stored = open_checkpoint(FIXTURES / name).stored_types()
    linears = {n: m for n, m in model.named_modules() if isinstance(m, Linear)}
    assert len(linears) == 4 * model.spec.num_layers and model.lm_head is None  # tied
    for module, linear in linears.items():
        assert linear.weight is None and isinstance(linear.form, GgufBlocks), module
        assert linear.form.blocks.name == _stored_format(stored, module), module
    embed = model.model.embed_tokens
    assert embed.weight is None
    assert embed.form.blocks.name == FORMATS[stored["model.embed_tokens.weight"]][0]
    assert all(p.dim() == 1 for p in model.parameters())  # only the norms are float


def _paged_logits(model: torch.nn.Module, prompt: list[int], runner) -> torch.Tensor:
    return runner(model).step([(0, prompt)])


def _plain_greedy(model: torch.nn.Module, prompt: list[int], runner) -> list[int]:
    """Greedy tokens of the model itself, one step at a time, no engine in between."""
    paged = runner(model)
    logits, tokens = paged.step([(0, prompt)]), []
    for _ in range(NEW_TOKENS):
        tokens.append(int(logits[-1].argmax()))
        logits = paged.step([(0, tokens[-1:])])
    return tokens


@pytest.mark.parametrize("name", PRESETS)
def test_the_kept_model_follows_the_file_dequantized(name: str, paged_runner) -> None:
    """Every position of a few prompts: a 16-bit file's logits are the float model's to fp32
    sum order; a block preset's to the activations' int8 rounding (5%, as for every preset)."""
    kept, floats = _model(name, kept=True), _model(name, kept=False)
    for prompt in PROMPTS:
        a = _paged_logits(kept, prompt, paged_runner)
        b = _paged_logits(floats, prompt, paged_runner)
        if name in HALF:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        else:
            assert float((a - b).norm() / b.norm()) < 0.05, prompt


def _engine_greedy(model: str, engine: str) -> list[list[int]]:
    from tandem.core import LLM, SamplingParams

    greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    with LLM(model=model, engine=engine, max_model_len=64) as llm:
        if model.endswith(".gguf"):
            assert llm.config.quantization == "gguf"
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], greedy, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.mark.engines("v0", "v1")
@pytest.mark.parametrize("name", HALF)
def test_engines_run_a_16_bit_file_as_the_float_model(name: str, engine: str) -> None:
    from tandem.core.gguf.export import exported

    got = _engine_greedy(str(FIXTURES / name), engine)
    assert got == _engine_greedy(str(exported(FIXTURES / name)), engine)


@pytest.mark.engines("v0", "v1")
@pytest.mark.parametrize("name", BLOCKS)
def test_engines_make_the_kept_models_greedy_tokens(name: str, engine: str, paged_runner) -> None:
    """The same tokens from either engine as from the kept model stepped by hand (the
    dequantized model's may differ where int8 activations flip a near-tie)."""
    want = [_plain_greedy(_model(name, kept=True), p, paged_runner) for p in PROMPTS]
    assert _engine_greedy(str(FIXTURES / name), engine) == want
