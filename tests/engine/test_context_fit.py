"""A model whose whole context does not fit the KV cache starts with the longest context
that does (one warning naming the numbers), on both engines; prompts are then held to
that context. A ``max_model_len`` given that does not fit is an error."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request, make_model

# the tiny Llama with a long context: 512 bytes of K and V per token in float32 (2 layers,
# 2 KV heads of 16), 8192 per block of 16 tokens
LONG = 4096
PER_BLOCK = 8192
GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def long_model() -> Any:
    return make_model(size="tiny", arch="llama", max_position_embeddings=LONG)


def context_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tandem" and "does not fit the KV cache" in r.getMessage()
    ]


def test_a_context_that_does_not_fit_shrinks_with_one_warning(
    engine, new_engine, run, hf, caplog
) -> None:
    path = long_model()
    with caplog.at_level(logging.WARNING, logger="tandem"):
        eng = new_engine(path, max_model_len=None, kv_cache_memory_bytes=20 * PER_BLOCK + 99)
    cfg = eng.config
    assert cfg.model.max_model_len == cfg.scheduler.max_model_len == 320
    assert cfg.cache.max_model_len == 320 and cfg.cache.num_kv_blocks == 20
    assert eng.stats().num_kv_blocks == 20
    [text] = context_warnings(caplog)
    assert f"context of {LONG} tokens" in text and "max_model_len=320" in text
    assert "20 blocks of 16 tokens, 163840 bytes" in text
    assert f"kv_cache_memory_bytes={20 * PER_BLOCK + 99}" in text
    assert "512 bytes per token" in text
    for flag in ("--max-model-len", "--kv-cache-memory-fraction", "--kv-cache-memory-bytes"):
        assert flag in text
    # the prompt-length checks use the chosen context
    with pytest.raises(ValueError, match=r"320 tokens; it must be shorter than max_model_len=320"):
        add_request(eng, "long", list(range(1, 321)), GREEDY)
    prompt = [1, *range(20, 320)]  # 301 tokens: 19 left
    [out] = run(eng, [prompt], SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True))
    got = out.outputs[0]
    assert (len(got.token_ids), got.finish_reason) == (19, "length")
    hf.assert_greedy(path, prompt, got.token_ids, 19, ignore_eos=True)


def test_a_block_count_shrinks_the_context_too(engine, new_engine, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="tandem"):
        eng = new_engine(long_model(), max_model_len=None, num_kv_blocks=10)
    assert eng.config.model.max_model_len == 160
    [text] = context_warnings(caplog)
    assert "num_kv_blocks=10" in text and "max_model_len=160" in text


def test_a_context_given_that_does_not_fit_is_an_error(engine, new_engine) -> None:
    with pytest.raises(ValueError) as info:
        new_engine(long_model(), max_model_len=LONG, kv_cache_memory_bytes=20 * PER_BLOCK)
    text = str(info.value)
    assert "holds 20 blocks of 16 tokens" in text
    assert f"one sequence of max_model_len={LONG} needs 256" in text
    assert "--max-model-len" in text and "--kv-cache-memory-bytes" in text


def test_the_default_cache_fits_a_small_model_whole(engine, new_engine, caplog) -> None:
    # a share of the machine's memory, capped at max_num_seqs full sequences: 4 x 256 blocks
    with caplog.at_level(logging.WARNING, logger="tandem"):
        eng = new_engine(long_model(), max_model_len=None, max_num_seqs=4)
    assert eng.config.model.max_model_len == LONG
    assert eng.stats().num_kv_blocks == 4 * LONG // 16
    assert "kv_cache_memory_fraction=0.5 of " in eng.config.cache.kv_source
    assert context_warnings(caplog) == []


def test_a_shortened_longrope_context_runs_as_if_given(engine, new_engine, run, hf) -> None:
    # Phi-3's longrope takes its short factors for a context within its pretraining
    # length (64): shortened to 64 after loading, the model must switch to them
    path = make_model(arch="phi3", sliding_window=None)
    prompt = [1, *range(30, 70)]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    shortened = new_engine(path, max_model_len=None, num_kv_blocks=4)
    assert shortened.config.model.max_model_len == 64
    given = new_engine(path, max_model_len=64)
    got = run(shortened, [prompt], params)[0].outputs[0].token_ids
    assert got == run(given, [prompt], params)[0].outputs[0].token_ids
    hf.assert_greedy(path, prompt, got, 12, ignore_eos=True)
