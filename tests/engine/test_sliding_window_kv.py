"""A long generation on a model whose every layer slides holds the blocks of its window
only, and still gives transformers' tokens: chunked prefill (8-token steps), a cache of
12 blocks of 4 (a whole sequence of 128 tokens would need 32), and on v1 a prefix-cache
hit whose blocks behind the window were evicted before it came. Where local layers sit
between global ones (Gemma 2 and 3), the local layers' own pool keeps their window."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.kv.window import peak_blocks
from tandem.core.testing import add_request, make_model, run_to_completion

# every layer slides: Mistral's window of 8; Qwen2's of 6 from layer 0 on
CASES: dict[str, tuple[str, dict[str, Any], int]] = {
    "mistral": ("mistral_window", {}, 8),
    "qwen2_all_layers": ("qwen2_window", {"max_window_layers": 0}, 6),
}
BLOCK, BLOCKS, NEW = 4, 12, 90
PROMPT = [1, *range(20, 50)]  # 31 tokens: longer than either window
OTHER = [1, *range(300, 320)]


def generate_watching_blocks(eng: Any, rid: str, prompt: list[int], new: int) -> tuple[Any, int]:
    """Run one request to its end; (its output, the most blocks in use after a step)."""
    add_request(eng, rid, prompt, SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True))
    most, out = 0, None
    while eng.has_unfinished_requests():
        for o in eng.step():
            out = o if o.finished else out
        stats = eng.stats()
        most = max(most, stats.num_kv_blocks - stats.num_free_kv_blocks)
    return out, most


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_long_generation_holds_its_window_only(case, engine, build_engine, hf) -> None:
    arch, overrides, window = CASES[case]
    path = make_model(arch=arch, **overrides)
    eng = build_engine(
        engine, path, block_size=BLOCK, num_kv_blocks=BLOCKS, max_num_batched_tokens=8
    )
    try:
        short = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
        # the prompt's blocks enter the prefix cache; the other prompt evicts its oldest
        run_to_completion(eng, [("a", PROMPT, short)])
        run_to_completion(eng, [("c", OTHER, short)])
        out, most = generate_watching_blocks(eng, "b", PROMPT, NEW)
        stats = eng.stats()
    finally:
        eng.shutdown()
    hf.assert_greedy(path, PROMPT, out.outputs[0].token_ids, NEW, ignore_eos=True)
    # between steps a request holds the window behind its next token: 3 blocks of 4 at most
    assert 0 < most <= peak_blocks(window, 1, BLOCK) < BLOCKS
    assert stats.num_free_kv_blocks == stats.num_kv_blocks == BLOCKS
    if engine == "v1":  # the blocks covering the prompt's last window came from the cache
        assert out.num_cached_tokens == 28


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_local_layers_keep_their_window_only(arch, engine, build_engine, hf) -> None:
    # one local layer (window 8) and one global layer: the global pool holds the whole
    # sequence (31 + 90 tokens: 31 blocks of 4), the local one 7 blocks, fewer than the
    # 31 it would need without freeing behind the window
    path = make_model(arch=arch)
    eng = build_engine(engine, path, block_size=BLOCK, num_kv_blocks=40, max_num_batched_tokens=8)
    try:
        cache = eng.config.cache
        assert (cache.local_layers, cache.local_window) == ((0,), 8)
        assert (cache.num_kv_blocks, cache.num_local_blocks) == (40, 7)
        short = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
        run_to_completion(eng, [("a", PROMPT, short)])
        out, most = generate_watching_blocks(eng, "b", PROMPT, NEW)
        stats = eng.stats()
    finally:
        eng.shutdown()
    hf.assert_greedy(path, PROMPT, out.outputs[0].token_ids, NEW, ignore_eos=True)
    # between steps: every block of the global layer, the window's of the local one
    assert most <= 31 + peak_blocks(8, 1, BLOCK)
    assert stats.num_free_kv_blocks == stats.num_kv_blocks == 40 + 7
    if engine == "v1":  # both pools held the prompt's blocks up to its last window
        assert out.num_cached_tokens == 28
