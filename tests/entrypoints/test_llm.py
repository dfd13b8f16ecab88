"""The LLM front door: engine choice, generate() inputs and outputs, lifetime."""

from __future__ import annotations

import pytest

from tandem.core import engines
from tandem.core.llm import LLM
from tandem.core.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def test_engine_read_from_env_at_construction(tiny_model_dir, monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_ENGINE", "v1")
    assert engines.resolve_engine_name(None) == "v1"
    monkeypatch.setenv("TANDEM_ENGINE", "v0")
    with LLM(model=tiny_model_dir, max_model_len=64) as llm:
        assert llm.engine_name == "v0"
        assert llm.engine_class.__module__.startswith("tandem.v0")
        assert isinstance(llm.engine, llm.engine_class)
    monkeypatch.delenv("TANDEM_ENGINE")
    assert engines.resolve_engine_name(None) == engines.DEFAULT_ENGINE
    assert engines.resolve_engine_name("v1") == "v1"  # an explicit choice wins


def test_engines_are_discovered_by_entry_point() -> None:
    assert "v0" in engines.installed_engines()
    from tandem.v0 import LLMEngine

    assert engines.load_engine_class("v0") is LLMEngine


def test_unknown_engine_lists_installed(tiny_model_dir) -> None:
    with pytest.raises(ValueError, match=r"unknown engine 'v9'; installed engines: .*v0"):
        LLM(model=tiny_model_dir, engine="v9")
    with pytest.raises(TypeError, match="engine must be a str"):
        LLM(model=tiny_model_dir, engine=0)


def test_bad_env_value_is_named(tiny_model_dir, monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_ENGINE", "v7")
    with pytest.raises(ValueError, match="TANDEM_ENGINE='v7'"):
        LLM(model=tiny_model_dir)


def test_unknown_engine_argument(tiny_model_dir) -> None:
    with pytest.raises(TypeError, match=r"unknown engine argument.*max_len"):
        LLM(model=tiny_model_dir, engine="v0", max_len=3)


def test_generate_accepts_every_prompt_form_in_order(v0_llm) -> None:
    tok = v0_llm.get_tokenizer()
    ids = tok.encode("a cat")
    prompts = ["hello there", {"prompt": "a cat"}, {"prompt_token_ids": ids}, "x"]
    outs = v0_llm.generate(prompts, GREEDY, use_tqdm=False)
    assert [o.prompt for o in outs] == ["hello there", "a cat", None, "x"]
    assert outs[1].prompt_token_ids == outs[2].prompt_token_ids == ids
    assert outs[1].outputs[0].token_ids == outs[2].outputs[0].token_ids
    assert all(o.finished and len(o.outputs[0].token_ids) == 4 for o in outs)
    single = v0_llm.generate("hello there", GREEDY, use_tqdm=False)
    assert single[0].outputs[0].token_ids == outs[0].outputs[0].token_ids


def test_generate_with_params_list_and_progress_bar(v0_llm, capsys) -> None:
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (2, 5)]
    outs = v0_llm.generate(["one", "two"], params)
    assert [len(o.outputs[0].token_ids) for o in outs] == [2, 5]
    assert "tok/s" in capsys.readouterr().err


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
def test_bad_input_rejected_before_any_work(v0_llm, prompts, params, exc, match) -> None:
    with pytest.raises(exc, match=match):
        v0_llm.generate(prompts, params, use_tqdm=False)
    assert not v0_llm.engine.has_unfinished_requests()
    out = v0_llm.generate("still fine", GREEDY, use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4


def test_invalid_sampling_field_named() -> None:
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingParams(top_p=1.5)


def test_shutdown_and_context_manager_idempotent(tiny_model_dir) -> None:
    llm = LLM(model=tiny_model_dir, engine="v0", max_model_len=64)
    with llm:
        llm.generate("hi", GREEDY, use_tqdm=False)
    llm.shutdown()
    llm.__exit__(None, None, None)
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate("hi", GREEDY, use_tqdm=False)
