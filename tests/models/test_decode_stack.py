"""Decode-only steps through the whole layer stack in one C call (``DecodeStack``): the same
tokens and logprobs as the modules, bit for bit, on the weights it takes; the modules
wherever it does not apply."""

from __future__ import annotations

import pytest
import torch

from tandem.core.layers.kernel_choice import resolve_kernels
from tandem.core.models import decode_stack
from tandem.core.testing import make_model
from tandem.core.testing.gguf_writer import write_gguf
from tandem.kernels import native

pytestmark = pytest.mark.skipif(not decode_stack.native.available(), reason="no C kernels here")

ROPE = {"rope_type": "default", "rope_theta": 10000.0}
# 4- and 8-bit blocks; q, k and v in two formats: the fused projection is a stack of parts
LEGACY = {"q_proj.weight": 3, "k_proj.weight": 3, "v_proj.weight": 8, "o_proj.weight": 2}
LEGACY |= {"mlp.gate_proj.weight": 6, "mlp.up_proj.weight": 6, "mlp.down_proj.weight": 7}
LEGACY |= {"embed_tokens.weight": 8, "lm_head.weight": 8}
KQUANT = {"q_proj.weight": 12, "k_proj.weight": 12, "v_proj.weight": 14, "o_proj.weight": 13}
KQUANT |= {"mlp.gate_proj.weight": 12, "mlp.up_proj.weight": 12, "mlp.down_proj.weight": 14}
KQUANT |= {"embed_tokens.weight": 6, "lm_head.weight": 14}
PROMPTS = ["one two three", "Item 3 of the list", "The 5 cats sat", "a"]


def _gguf(tmp_path_factory, arch: str, qtypes: dict[str, int], **shape) -> str:
    src = make_model(size="tiny", arch=arch, rope_parameters=ROPE, **shape)
    out = tmp_path_factory.mktemp(f"stack-{arch}") / f"tiny-{arch}.gguf"
    return str(write_gguf(src, out, qtypes))


def _generate(
    model: str, mode: str, monkeypatch, prompts=PROMPTS, max_tokens=10, **kwargs
) -> tuple[list, int]:
    """Greedy answers with their logprobs, and how many steps the C stack ran."""
    from tandem.core import LLM, SamplingParams

    monkeypatch.setenv("TANDEM_DECODE_STACK", mode)
    ran = []
    real = decode_stack.DecodeStack.run

    def counted(self, x, positions, caches, meta):
        out = real(self, x, positions, caches, meta)
        if out is not None:  # a step of prefills with context: a verify, not a prompt
            ran.append("verify" if meta.num_prefills and int(positions[0]) else "step")
        return out

    monkeypatch.setattr(decode_stack.DecodeStack, "run", counted)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=3)
    kwargs = {"engine": "v0", "max_model_len": 64} | kwargs
    with LLM(model=model, **kwargs) as llm:
        outs = llm.generate(prompts, params, use_tqdm=False)
    answers = [(o.outputs[0].token_ids, o.outputs[0].logprobs) for o in outs]
    return answers, ran


def _same_as_modules(model: str, monkeypatch, prompts=PROMPTS, **kwargs) -> list[str]:
    want, ran = _generate(model, "modules", monkeypatch, prompts, **kwargs)
    assert not ran
    got, ran = _generate(model, "c", monkeypatch, prompts, **kwargs)
    assert len(ran) >= 4  # the prompts' step, decode steps (and verify steps)
    assert [a for a, _ in got] == [a for a, _ in want]
    for (_, lp_got), (_, lp_want) in zip(got, want):  # every entry, exactly
        assert [{t: p.logprob for t, p in d.items()} for d in lp_got] == [
            {t: p.logprob for t, p in d.items()} for d in lp_want
        ]
    return ran


def test_gguf_blocks_and_a_stacked_projection_match_the_modules(tmp_path_factory, monkeypatch):
    model = _gguf(tmp_path_factory, "llama", LEGACY)
    _same_as_modules(model, monkeypatch)


def test_speculative_verify_steps_match_the_modules(tmp_path_factory, monkeypatch):
    """The model drafting for itself (every draft kept): its verify steps of k + 1 tokens a
    sequence after their context, and the draft's own catch-up steps, go through the C
    stack with the modules' numbers."""
    model = _gguf(tmp_path_factory, "llama", LEGACY)
    spec = {"method": "draft", "model": model, "num_speculative_tokens": 3}
    ran = _same_as_modules(model, monkeypatch, PROMPTS[:2], speculative_config=spec)
    assert "verify" in ran


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: the q/k/v projection's bias
def test_k_quants_match_the_modules(tmp_path_factory, monkeypatch, arch):
    shape = {"hidden_size": 256, "intermediate_size": 512}
    model = _gguf(tmp_path_factory, arch, KQUANT, **shape)
    _same_as_modules(model, monkeypatch)


# each a program the Llama layer is not: q/k norms over each head (Qwen 3) or over the whole
# projection with post-norm-only layers (OLMo 2); sandwich norms, (1 + w) norms, tanh-GELU,
# scaled embeddings, soft-capped attention and sliding windows (Gemma 2), with local and
# global rope tables and q/k norms (Gemma 3); residual, attention and embedding multipliers
# and biases (Granite); a window on some layers only (Qwen 2)
NEW_PROGRAMS = ["qwen3", "olmo2", "gemma2", "gemma3", "granite", "qwen2_window"]


@pytest.mark.skipif(not native.linear_f32.available(), reason="no C fp32 linear kernel here")
@pytest.mark.parametrize("arch", NEW_PROGRAMS)
def test_each_layer_program_matches_the_modules(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    model = str(make_model(size="tiny", arch=arch))
    ran = _same_as_modules(model, monkeypatch, dtype="float32")
    assert ran.count("step") >= 4 * 9 // 4  # every decode step of every sequence's batch


@pytest.mark.skipif(not native.linear_f32.available(), reason="no C fp32 linear kernel here")
@pytest.mark.parametrize("arch", ["gemma3", "olmo2"])
def test_verify_steps_of_each_program_match_the_modules(arch, tmp_path, monkeypatch):
    """Steps laid out as prefills (a verify, a draft's catch-up) with q/k norms, sandwich
    or post norms, two rope tables."""
    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    model = str(make_model(size="tiny", arch=arch))
    spec = {"method": "draft", "model": model, "num_speculative_tokens": 3}
    ran = _same_as_modules(
        model, monkeypatch, PROMPTS[:2], speculative_config=spec, dtype="float32"
    )
    assert "verify" in ran


def _grouped_steps(model: torch.nn.Module, steps: list[list[tuple[int, list[int]]]]) -> list:
    """Logits of ``steps`` (chunks of (sequence, new tokens), prefills first), then the
    caches, with the
    sliding layers' caches in a pool of their own: fewer blocks, handed out in another
    order than the global pool's, so the two pools' slots and tables differ."""
    from tandem.core.kv.cache import allocate_kv_caches
    from tandem.core.layers.attention_metadata import build_metadata

    spec, bs = model.spec, 4
    kv = (spec.num_kv_heads, spec.head_dim)
    pools = {
        False: allocate_kv_caches(spec.num_layers, *kv, 48, bs, torch.float32, "cpu"),
        True: allocate_kv_caches(spec.num_layers, *kv, 24, bs, torch.float32, "cpu"),
    }
    caches = [pools[w is not None][i] for i, w in enumerate(spec.windows)]
    free = {False: list(range(48)), True: list(range(24))[::-1]}
    tables: dict[tuple[bool, int], list[int]] = {}
    lens: dict[int, int] = {}
    out = []
    for chunks in steps:
        ids, positions, q_lens, s_lens = [], [], [], []
        for sid, tokens in chunks:
            start = lens.get(sid, 0)
            lens[sid] = end = start + len(tokens)
            for pool in (False, True):
                table = tables.setdefault((pool, sid), [])
                while len(table) * bs < end:
                    table.append(free[pool].pop())
            ids += tokens
            positions += range(start, end)
            q_lens.append(len(tokens))
            s_lens.append(end)
        sids = [sid for sid, _ in chunks]
        meta = build_metadata(q_lens, s_lens, [tables[False, s] for s in sids], bs)
        meta.local = build_metadata(q_lens, s_lens, [tables[True, s] for s in sids], bs)
        with torch.no_grad():
            hidden = model(torch.tensor(ids), torch.tensor(positions), caches, meta)
            out.append(model.compute_logits(hidden))
    return [*out, *(c for pair in caches for c in pair)]


@pytest.mark.skipif(not native.linear_f32.available(), reason="no C fp32 linear kernel here")
def test_the_local_layers_pool_of_blocks_matches_the_modules(tmp_path, monkeypatch, stack_ran):
    """Gemma 3's sliding layers keep blocks of their own: those layers read the local
    pool's slots and tables, at decode and in a step laid out as a prefill."""
    from tandem.core.engine.loader import load_model

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    model = load_model(str(make_model(size="tiny", arch="gemma3")), dtype=torch.float32)
    ran = stack_ran
    steps = [[(0, [5, 9, 2, 7, 7, 1]), (1, [7, 1, 3])]]
    steps += [[(0, [3]), (1, [4])] for _ in range(6)]
    steps += [[(0, [8, 2, 6]), (1, [1, 5])]]  # a verify's layout: new tokens after context
    logits = {}
    for mode in ("modules", "c"):
        model.use_kernels(resolve_kernels(decode_stack=mode))
        logits[mode] = _grouped_steps(model, steps)
    assert sum(ran) == len(steps)  # the C stack took every step of the second pass
    for got, want in zip(logits["c"], logits["modules"], strict=True):  # and each cache
        assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("arch", "overrides", "why"),
    [  # top-3 of 256 experts: torch.topk sorts there, and C does not follow it
        ("deepseek_v3", {"n_routed_experts": 256}, "layer 1: a mixture of experts with top-3"),
    ],
)
def test_what_it_does_not_take_runs_the_modules(arch, overrides, why, tmp_path, monkeypatch):
    from tandem.core.engine.loader import load_model

    monkeypatch.setenv("TANDEM_CACHE_DIR", str(tmp_path))
    model = load_model(str(make_model(size="tiny", arch=arch, **overrides)), dtype=torch.float32)
    stack = model.model.decode_stack
    assert not stack.usable and why in stack.reason
