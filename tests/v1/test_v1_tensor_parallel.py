"""Engine v1 with tensor_parallel_size > 1 on the ``mp`` executor (gloo on the CPU):
the same greedy tokens as one process, on models that split every way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tp_support import NEW, PROMPTS, greedy, tokens

from tandem.core import LLM
from tandem.core.config.engine_args import EngineArgs
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import make_model
from tandem.v1 import LLMEngine


def _args(arch: str, tp: int, **kw: Any) -> EngineArgs:
    path = make_model(size="tiny", arch=arch)
    kw.setdefault("max_num_seqs", 4)
    return EngineArgs(model=str(path), device="cpu", tensor_parallel_size=tp, **kw)


def _inproc(arch: str, tp: int, logprobs: int | None = None, **kw: Any) -> list[Any]:
    """Greedy outputs of an engine whose core runs here (its ranks are still processes)."""
    with LLMEngine.from_engine_args(_args(arch, tp, **kw), multiprocess=False) as engine:
        return greedy(engine, logprobs=logprobs)


def test_two_ranks_match_one_process_through_the_front_door(tiny_model: Path) -> None:
    """``LLM(..., tensor_parallel_size=2)``: GQA (2 KV heads, one per rank), chunked
    prefill beside decodes, logprobs of the prompt and of each token, all through the
    engine's own processes (core, detokenizer, two ranks)."""
    kw: dict[str, Any] = {"max_num_batched_tokens": 8, "max_num_seqs": 4}
    with LLMEngine.from_engine_args(_args("llama", 1, **kw), multiprocess=False) as engine:
        whole = greedy(engine, logprobs=3)
    params = SamplingParams(
        temperature=0, max_tokens=NEW, ignore_eos=True, logprobs=3, prompt_logprobs=3
    )
    prompts = [{"prompt_token_ids": p} for p in PROMPTS]
    with LLM(tiny_model, engine="v1", tensor_parallel_size=2, **kw) as llm:
        client = llm.engine.client
        assert len([n for n in client.pids if n.startswith("tensor-parallel")]) == 2
        split = llm.generate(prompts, params, use_tqdm=False)
        stats = llm.engine.stats()
    assert tokens(split) == tokens(whole)
    for a, b in zip(split, whole):
        got, want = a.outputs[0].logprobs, b.outputs[0].logprobs
        assert [sorted(d) for d in got] == [sorted(d) for d in want]
        for d_got, d_want in zip(got, want):
            for tok, lp in d_want.items():
                assert d_got[tok].logprob == pytest.approx(lp.logprob, abs=1e-4)
        assert len(a.prompt_logprobs) == len(b.prompt_logprobs)
    assert stats.num_free_kv_blocks == stats.num_kv_blocks


@pytest.mark.parametrize(
    "arch",
    [
        "mistral",  # one KV head, fewer than the ranks: each rank keeps it
        "qwen2",  # a tied LM head over the vocabulary shards; q/k/v biases
        "mixtral",  # experts split between the ranks (expert parallel), top-2
        "deepseek_v3",  # latent attention, each rank its heads; grouped sigmoid routing
    ],
)
def test_two_ranks_match_one_process(arch: str) -> None:
    assert tokens(_inproc(arch, 2)) == tokens(_inproc(arch, 1))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "tp"),
    [
        ("llama", 4),  # 2 KV heads over 4 ranks: each head on two ranks
        ("qwen3", 2),  # per-head q/k norms, tied head, 6 heads
        ("phi3", 2),  # q/k/v and gate/up fused in the checkpoint
        ("gemma2", 2),  # soft caps and sandwich norms
        ("qwen2_moe", 2),  # a gated shared expert beside 6 routed ones
        ("qwen3_moe", 2),  # a dense first layer, top-3 of 8
        ("deepseek_v3_plain", 2),  # latent attention with q from x and biases, 3 heads a rank
    ],
)
def test_more_models_match_one_process(arch: str, tp: int) -> None:
    assert tokens(_inproc(arch, tp)) == tokens(_inproc(arch, 1))


@pytest.mark.slow
def test_int8_runs_sharded() -> None:
    """Each rank quantizes its own part of the activations (a row-parallel layer's input
    is split), so the logits differ a little: the prompt's top tokens (teacher-forced,
    so one early difference cannot carry over) agree at nearly every position."""
    whole = _inproc("llama", 1, quantization="int8", logprobs=1)
    split = _inproc("llama", 2, quantization="int8", logprobs=1)
    pairs = [
        (_top(a), _top(b))
        for w, s in zip(whole, split)
        for a, b in zip(w.prompt_logprobs, s.prompt_logprobs)
        if a is not None
    ]
    assert sum(a == b for a, b in pairs) / len(pairs) >= 0.9


def _top(entries: dict[int, Any]) -> int:
    return min(entries, key=lambda tok: entries[tok].rank)


def test_a_model_that_does_not_split_is_refused_before_any_process() -> None:
    with pytest.raises(ValueError, match=r"tensor_parallel_size=3 must divide num_attention_heads"):
        _args("llama", 3).create_config()
    with pytest.raises(ValueError, match="normalises q and k over the whole projection"):
        _args("olmo2", 2).create_config()
