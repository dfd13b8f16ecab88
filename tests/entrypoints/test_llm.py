"""The LLM front door on both engines: engine choice, generate() inputs and outputs, lifetime."""

from __future__ import annotations

import pytest

from tandem.core.engine import protocol as engines
from tandem.core.engine.stats import EngineStats
from tandem.core.entrypoints.llm import LLM
from tandem.core.inputs.sampling_params import SamplingParams

pytestmark = pytest.mark.engines("v0", "v1")

GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def test_engine_read_from_env_at_construction(tiny_model, engine: str) -> None:
    # the harness sets TANDEM_ENGINE to the engine under test; LLM reads it when built
    assert engines.resolve_engine_name(None) == engine
    with LLM(model=tiny_model, max_model_len=64) as llm:
        assert llm.engine_name == engine
        assert llm.engine_class is engines.load_engine_class(engine)
        assert llm.engine_class.__module__.startswith(f"tandem.{engine}.")
        assert isinstance(llm.engine, llm.engine_class)
        out = llm.generate("hello", GREEDY, use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 4


def test_generate_accepts_every_prompt_form_in_order(shared_llm) -> None:
    tok = shared_llm.get_tokenizer()
    ids = tok.encode("a cat")
    prompts = ["hello there", {"prompt": "a cat"}, {"prompt_token_ids": ids}, "x"]
    outs = shared_llm.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.prompt for o in outs] == ["hello there", "a cat", None, "x"]
    assert outs[1].prompt_token_ids == outs[2].prompt_token_ids == ids
    assert outs[1].outputs[0].token_ids == outs[2].outputs[0].token_ids
    assert all(o.finished and len(o.outputs[0].token_ids) == 4 for o in outs)
    single = shared_llm.generate("hello there", GREEDY, use_tqdm=False)
    assert single[0].outputs[0].token_ids == outs[0].outputs[0].token_ids


def test_generate_with_params_list_and_progress_bar(shared_llm, capsys) -> None:
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (2, 5)]
    outs = shared_llm.generate(["one", "two"], params)
    assert [len(o.outputs[0].token_ids) for o in outs] == [2, 5]
    assert "tok/s" in capsys.readouterr().err


def test_stats_after_generate(shared_llm) -> None:
    shared_llm.generate(["a b c", "d e"], GREEDY, use_tqdm=False)
    stats = shared_llm.stats()
    assert isinstance(stats, EngineStats)
    assert (stats.num_running, stats.num_waiting) == (0, 0)
    assert stats.num_free_kv_blocks == stats.num_kv_blocks > 0


@pytest.mark.parametrize(
    ("prompts", "params", "exc", "match"),
    [
        ([], None, ValueError, "prompts is empty"),
        ("", None, ValueError, "prompt 0 is empty"),
        (["ok", ""], None, ValueError, "prompt 1 is empty"),
        ([{"prompt_token_ids": []}], None, ValueError, "prompt 0 is empty"),
        ([{"prompt_token_ids": [1, 512]}], None, ValueError, "token id 512 is outside"),
        ([{"prompt_token_ids": [1, -3]}], None, ValueError, "token id -3 is outside"),
        ([{"prompt_token_ids": [1, 2.0]}], None, TypeError, "must be ints"),
        ([{"prompt_token_ids": "12"}], None, TypeError, "must be a list of ints"),
        ([{"text": "hi"}], None, TypeError, "exactly one key"),
        ([42], None, TypeError, "prompt 0 must be a str or a dict"),
        (42, None, TypeError, "prompts must be a str"),
        ([{"prompt_token_ids": [1] * 64}], None, ValueError, "max_model_len=64"),
        (["a", "b"], [GREEDY], ValueError, "1 entries but there are 2 prompts"),
        (["a"], ["greedy"], TypeError, r"sampling_params\[0\] must be a SamplingParams"),
        (["a"], {"temperature": 0}, TypeError, "sampling_params must be None"),
    ],
)
def test_bad_input_rejected_before_any_work(shared_llm, prompts, params, exc, match) -> None:
    before = shared_llm.stats()
    with pytest.raises(exc, match=match):
        shared_llm.generate(prompts, params, use_tqdm=False)
    assert not shared_llm.engine.has_unfinished_requests()
    assert shared_llm.stats() == before  # nothing reached the scheduler
    out = shared_llm.generate("still fine", GREEDY, use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4


def test_unknown_engine_argument(tiny_model, engine: str) -> None:
    with pytest.raises(TypeError, match=r"unknown engine argument.*max_len"):
        LLM(model=tiny_model, engine=engine, max_len=3)


def test_bad_model_argument(tmp_path, engine: str) -> None:
    with pytest.raises(TypeError, match="model must be a directory path"):
        LLM(model=3, engine=engine)
    with pytest.raises((ValueError, FileNotFoundError), match="nope"):
        LLM(model=tmp_path / "nope", engine=engine)


def test_shutdown_and_context_manager_idempotent(tiny_model, engine: str) -> None:
    llm = LLM(model=tiny_model, engine=engine, max_model_len=64)
    with llm:
        llm.generate("hi", GREEDY, use_tqdm=False)
    llm.shutdown()
    llm.__exit__(None, None, None)
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate("hi", GREEDY, use_tqdm=False)
    with pytest.raises(RuntimeError, match="shut down"):
        llm.stats()
