"""``quantization="gguf"`` on a Q4_K_M-like file: Q4_K, Q5_K and Q6_K tensors kept in their
super-blocks, a fused module whose parts differ in format kept as a stack."""

from __future__ import annotations

import pytest
import torch

from tandem.core.gguf.export import exported
from tandem.core.testing import make_model
from tandem.core.testing.gguf_writer import write_gguf

ROPE = {"rope_type": "default", "rope_theta": 10000.0}
# K-quants need rows of multiples of 256 values: hidden 256, intermediate 512
SHAPE = {"hidden_size": 256, "intermediate_size": 512}
# as llama.cpp's Q4_K_M mixes them: most in Q4_K, v / down / the head in Q6_K (here o in
# Q5_K, so all three are used; the embedding in Q5_0, which llama.cpp takes for Q4_K rows
# not of 256); q, k and v fuse into one module of two formats
QTYPES = {"q_proj.weight": 12, "k_proj.weight": 12, "v_proj.weight": 14, "o_proj.weight": 13}
QTYPES |= {"mlp.gate_proj.weight": 12, "mlp.up_proj.weight": 12, "mlp.down_proj.weight": 14}
QTYPES |= {"embed_tokens.weight": 6, "lm_head.weight": 14}


@pytest.fixture(scope="module")
def kquant_gguf(tmp_path_factory):
    src = make_model(size="tiny", arch="llama", rope_parameters=ROPE, **SHAPE)
    return write_gguf(src, tmp_path_factory.mktemp("kgguf") / "tiny-q4_k_m.gguf", QTYPES)


def test_super_blocks_are_kept_near_the_file_size(kquant_gguf, tmp_path, monkeypatch) -> None:
    from tandem.core.engine.loader import load_model
    from tandem.core.layers.linear import Linear
    from tandem.core.layers.weight_form import GgufBlocks
    from tandem.kernels.gguf_blocks import QuantStack

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    kept = load_model(str(kquant_gguf), dtype=torch.float32, quantization="gguf")
    floats = load_model(str(kquant_gguf), dtype=torch.float32)  # the same file, dequantized
    linears = [m for m in kept.modules() if isinstance(m, Linear)]
    assert linears and all(isinstance(m.form, GgufBlocks) and m.weight is None for m in linears)
    assert kept.model.embed_tokens.form.blocks.name == "Q5_0"
    assert {m.form.blocks.name for m in linears} == {"Q4_K+Q6_K", "Q5_K", "Q4_K", "Q6_K"}
    assert isinstance(kept.model.layers[0].self_attn.qkv_proj.form.blocks, QuantStack)
    parts = [p for m in linears for p in m.form.parts]
    blocks = sum(p.data.nbytes for p in parts) + kept.model.embed_tokens.form.blocks.data.nbytes
    rest = sum(p.numel() * p.element_size() for p in kept.parameters())
    assert blocks + rest < 1.05 * kquant_gguf.stat().st_size
    h = torch.randn(5, kept.spec.hidden_size, generator=torch.Generator().manual_seed(0))
    a, b = kept.compute_logits(h), floats.compute_logits(h)
    assert (a - b).norm() / b.norm() < 0.02  # only the activations' int8 rounding differs
    ids = torch.tensor([3, 7, 300])
    torch.testing.assert_close(kept.model.embed_tokens(ids), floats.model.embed_tokens(ids))


@pytest.mark.slow
def test_engines_agree_and_follow_the_dequantized_model(kquant_gguf, tmp_path, monkeypatch) -> None:
    """Both engines make the same greedy tokens on the blocks as stored; teacher-forced on
    the float32 model's greedy continuations (the same file, dequantized), the blocks pick
    fp32's token or one within a near-tie of it (the activations' int8 rounding flips
    near-ties of this untrained model, as int8 does)."""
    from tandem.core import LLM, SamplingParams

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    root = str(exported(kquant_gguf))
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompts = ["one two three", "Item 3", "The 5 cats"]
    with LLM(model=root, engine="v0", max_model_len=64) as llm:
        refs = llm.generate(prompts, greedy, use_tqdm=False)
    forced = [{"prompt_token_ids": r.prompt_token_ids + r.outputs[0].token_ids} for r in refs]
    score = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
    tokens = []
    for engine in ("v0", "v1"):
        with LLM(model=str(kquant_gguf), engine=engine, max_model_len=64) as llm:
            assert llm.config.quantization == "gguf"
            tokens.append(
                [o.outputs[0].token_ids for o in llm.generate(prompts, greedy, use_tqdm=False)]
            )
            scored = llm.generate(forced, score, use_tqdm=False)
    assert tokens[0] == tokens[1]
    gaps = [
        max(lp.logprob for lp in q.prompt_logprobs[len(r.prompt_token_ids) + j].values())
        - q.prompt_logprobs[len(r.prompt_token_ids) + j][tok].logprob
        for r, q in zip(refs, scored)
        for j, tok in enumerate(r.outputs[0].token_ids)
    ]
    print(f"K-quant as stored vs fp32: {sum(g == 0 for g in gaps)}/{len(gaps)} top-1, gaps {gaps}")
    assert sum(g == 0 for g in gaps) >= 0.8 * len(gaps) and max(gaps) < 0.15, gaps
