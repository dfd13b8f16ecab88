"""``quantization="gguf"`` on mixture-of-experts files: each expert's gate, up and down
kept in their GGUF blocks (views of the file's mapping) and run one expert at a time; the
same numbers as the file dequantized to float32, up to the kernels' rounding of the
activations to int8."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from tandem.core.gguf import open_checkpoint
from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.layers.moe import Experts
from tandem.core.layers.weight_form import GgufBlocks
from tandem.kernels.gguf_blocks import QuantStack, dequantize, quantize
from tandem.kernels.native import linear_gguf as native_gguf
from tandem.kernels.ops.moe import topk_route

from .gguf_moe_files import made_or_skip

E, HIDDEN, INTER = 4, 64, 32
STACKS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def _experts(seed: int) -> Experts:
    gen = torch.Generator().manual_seed(seed)
    experts = Experts(E, HIDDEN, INTER, "silu", torch.float32)
    with torch.no_grad():
        experts.gate_up.weight.copy_(torch.randn(E, 2 * INTER, HIDDEN, generator=gen) * 0.2)
        experts.down.weight.copy_(torch.randn(E, HIDDEN, INTER, generator=gen) * 0.2)
    return experts


def _keep(experts: Experts, gate_up: bool, down: bool) -> Experts:
    """The chosen projections kept in blocks (gate in Q8_0 and up in Q5_0: a stack of two;
    down in Q4_1), the others floats; returns float experts of the blocks' exact values."""
    plain = _experts(0)
    for name, qtypes in (("gate_up", (8, 6)), ("down", (3,))):
        stacked, keep = getattr(experts, name), gate_up if name == "gate_up" else down
        weights = []
        for e in range(E):
            w = stacked.weight[e]
            parts = [quantize(rows, q) for rows, q in zip(w.chunk(len(qtypes)), qtypes)]
            weights.append(parts[0] if len(parts) == 1 else QuantStack(tuple(parts)))
            exact = torch.cat([dequantize(p.data, p.qtype, p.k) for p in parts])
            getattr(plain, name).weight.data[e].copy_(exact)
        if keep:
            stacked.register_parameter("weight", None)
            stacked.use_quantized(weights)
        else:
            stacked.weight.data.copy_(getattr(plain, name).weight)
    return plain


@pytest.mark.parametrize(("gate_up", "down"), [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("tokens", [1, 9])
def test_kept_experts_compute_what_their_blocks_hold(gate_up, down, tokens, monkeypatch):
    experts = _experts(0)
    plain = _keep(experts, gate_up, down)
    assert experts.kept and experts.quantize() == 0  # int8 does not replace the blocks
    experts.prepare()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, HIDDEN, generator=gen)
    weights, ids = topk_route(torch.randn(tokens, E, generator=gen), 2, True)
    want = plain(x, ids, weights)
    rounded = experts(x, ids, weights)  # C kernels: x rounded to int8 per 32 values
    assert (rounded - want).norm() / want.norm() < 0.02
    monkeypatch.setattr(native_gguf, "linear", lambda *args, **kwargs: None)
    torch.testing.assert_close(experts(x, ids, weights), want, atol=1e-5, rtol=1e-5)


def test_kept_experts_refuse_weights_of_another_shape() -> None:
    experts = _experts(0)
    w = quantize(torch.zeros(2 * INTER, HIDDEN), 8)
    with pytest.raises(ValueError, match=r"weights must be 4 quantized weights of \[64, 64\]"):
        experts.gate_up.use_quantized([w] * 3)
    with pytest.raises(ValueError, match=r"got 4 of \[\(32, 64\)\]"):
        experts.gate_up.use_quantized([quantize(torch.zeros(INTER, HIDDEN), 8)] * E)


# -- files quantized by llama.cpp ------------------------------------------------------------

# rows of 256 values, so that Q4_K_M's K-quants apply to every expert projection
WIDE = {"hidden_size": 256, "moe_intermediate_size": 256, "intermediate_size": 512}
ONE_EXPERT = {"num_local_experts": 1, "num_experts_per_tok": 1}
# id -> (source, GGUF type, the source's overrides)
FILES = {
    "mixtral": ("mixtral", "Q4_K_M", {"hidden_size": 256, "intermediate_size": 256}),
    "qwen2_moe": ("qwen2_moe", "Q4_K_M", {**WIDE, "shared_expert_intermediate_size": 256}),
    "deepseek_v3": ("deepseek_v3", "Q4_K_M", WIDE),
    "qwen3_moe": ("qwen3_moe", "Q8_0", {}),  # down rows of 24 values stay F16: gate, up kept
    # one expert: the quantizer stores the router [1, H] as [H], the stacks [1, N, K] as [N, K]
    "qwen3_moe_one_expert": ("qwen3_moe", "Q8_0", ONE_EXPERT),
}


@pytest.fixture(scope="session")
def moe_gguf():
    return made_or_skip()


def _kept_bytes(model: torch.nn.Module) -> int:
    """Bytes of every weight kept in blocks, and of every float parameter."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    forms = [getattr(m, "form", None) for m in model.modules()]
    forms += [f for m in model.modules() for f in getattr(m, "forms", ())]  # the experts
    for form in forms:
        if isinstance(form, GgufBlocks):
            total += sum(p.data.nbytes for p in getattr(form.blocks, "parts", (form.blocks,)))
    return total


@pytest.mark.parametrize("name", list(FILES))
def test_a_quantized_moe_file_keeps_its_experts_near_its_size(
    moe_gguf, name, paged_runner, tmp_path, monkeypatch
) -> None:
    from tandem.core.engine.loader import load_model

    source, ftype, overrides = FILES[name]
    path, _ = moe_gguf(source, ftype, **overrides)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    kept = load_model(str(path), dtype=torch.float32, quantization="gguf")
    floats = load_model(str(path), dtype=torch.float32)  # the same file, dequantized
    experts = [m for m in kept.modules() if isinstance(m, Experts)]
    assert experts and all(m.gate_up.weight is None and m.gate_up.quant for m in experts)
    assert all(m.down.weight is None for m in experts)  # F16 rows (of 24) kept 16-bit too
    assert _kept_bytes(kept) < 1.1 * path.stat().st_size
    tokens = [1, *torch.randint(4, 512, (12,), generator=torch.Generator().manual_seed(0)).tolist()]
    monkeypatch.setattr(native_gguf, "linear", lambda *args, **kwargs: None)  # no rounding
    kept.use_kernels(resolve_kernels(decode_stack="modules"))  # C's GGUF kernels round
    a = paged_runner(kept).step([(0, tokens)])
    b = paged_runner(floats).step([(0, tokens)])
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen2_moe", "deepseek_v3"])
def test_engines_agree_and_follow_the_dequantized_moe(moe_gguf, name, tmp_path, monkeypatch):
    """Both engines make the same greedy tokens on the experts as stored; teacher-forced
    on the float32 model's greedy continuations (the same file, dequantized), the blocks
    pick fp32's token, or mostly one within a near-tie of it, as for dense files
    (test_gguf_kquant.py). Where the activations' int8 rounding flips a near-tie of a
    router, a whole expert's share changes: llama.cpp, running the same file with its own
    rounding, departs from the dequantized model as far (up to 2 nats on these models)."""
    from tandem.core import LLM, SamplingParams
    from tandem.core.gguf.export import exported

    source, ftype, overrides = FILES[name]
    path, _ = moe_gguf(source, ftype, **overrides)
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    greedy = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompts = ["one two three", "Item 3", "The 5 cats"]
    with LLM(model=str(exported(path)), engine="v0", max_model_len=64) as llm:
        refs = llm.generate(prompts, greedy, use_tqdm=False)
    forced = [{"prompt_token_ids": r.prompt_token_ids + r.outputs[0].token_ids} for r in refs]
    score = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1)
    tokens = []
    for engine in ("v0", "v1"):
        with LLM(model=str(path), engine=engine, max_model_len=64) as llm:
            assert llm.config.quantization == "gguf"
            outs = llm.generate(prompts, greedy, use_tqdm=False)
            tokens.append([o.outputs[0].token_ids for o in outs])
            scored = llm.generate(forced, score, use_tqdm=False)
    assert tokens[0] == tokens[1]
    gaps = [
        max(lp.logprob for lp in q.prompt_logprobs[len(r.prompt_token_ids) + j].values())
        - q.prompt_logprobs[len(r.prompt_token_ids) + j][tok].logprob
        for r, q in zip(refs, scored)
        for j, tok in enumerate(r.outputs[0].token_ids)
    ]
    top1 = sum(g == 0 for g in gaps)
    print(f"{name} experts as stored vs fp32: {top1}/{len(gaps)} top-1, gaps {gaps}")
    assert top1 >= 0.8 * len(gaps) and sorted(gaps)[int(0.9 * len(gaps))] < 0.15, gaps
    assert max(gaps) < 1.0, gaps


def test_a_file_with_one_expert_reads_its_dropped_dimension_back(moe_gguf) -> None:
    """GGUF drops leading dimensions of 1 (llama.cpp's quantizer writes a one-expert router
    as [H] and each stack of experts as [N, K]): the same file's tensors, so stored, read
    back as they were (the quantized file itself: the test above, where llama.cpp is
    compiled)."""
    path, _ = moe_gguf("qwen3_moe", **ONE_EXPERT)
    want = {t.name: t.floats() for t in open_checkpoint(path).tensors()}
    dropped = open_checkpoint(path)
    infos = dropped.file.tensors
    squeezed = [n for n in infos if n.split(".")[-2] in ("ffn_gate_inp", *STACKS)]
    assert squeezed and all(infos[n].shape[0] == 1 for n in squeezed)
    for name in squeezed:
        infos[name] = replace(infos[name], shape=infos[name].shape[1:])
    got = {t.name: t.floats() for t in dropped.tensors()}
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        assert got[key].shape == value.shape and np.array_equal(got[key], value), key
