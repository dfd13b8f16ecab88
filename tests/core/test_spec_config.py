from __future__ import annotations

import pytest

from tandem.core.cli.engine_kwargs import engine_args
from tandem.core.cli.options import build_parser
from tandem.core.config.engine_args import EngineArgs
from tandem.core.engine.stats import EngineStats
from tandem.core.server.metrics import Metrics
from tandem.core.speculative import SpeculativeConfig
from tandem.core.validate import RequestError


def test_vllm_style_dicts_and_plain_args() -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    spec = SpeculativeConfig.from_args(dict(ngram, prompt_lookup_min=2), None, None)
    assert spec == SpeculativeConfig("ngram", 4, prompt_lookup_min=2, prompt_lookup_max=4)
    draft = SpeculativeConfig.from_args({"model": "d", "num_speculative_tokens": 3})
    assert (draft.method, draft.model, draft.num_speculative_tokens) == ("draft", "d", 3)
    plain = SpeculativeConfig.from_args(None, "d", None)
    assert (plain.method, plain.num_speculative_tokens) == ("draft", 4)
    assert SpeculativeConfig.from_args(None, "d", 7).num_speculative_tokens == 7
    assert SpeculativeConfig.from_args(spec) == spec
    assert SpeculativeConfig.from_args(None, None, None) is None
    args = EngineArgs(model="m", speculative_config=ngram)
    assert args.speculative() == SpeculativeConfig("ngram", 4)


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        ({"speculative_config": {"method": "eagle"}}, "speculative_config.method", "ngram, draft"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 0}},
         "speculative_config.num_speculative_tokens", ">= 1"),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 17}},
         "speculative_config.num_speculative_tokens", "<= 16"),
        ({"speculative_config": {"method": "ngram", "prompt_lookup_min": 5}},
         "speculative_config.prompt_lookup_min", "<= prompt_lookup_max"),
        ({"speculative_config": {"method": "draft"}}, "speculative_config.model", "draft model"),
        ({"speculative_config": {"method": "ngram", "model": "d"}},
         "speculative_config.model", "only for method 'draft'"),
        ({"speculative_config": {"bogus": 1}}, "speculative_config", "allowed: method"),
        ({"speculative_config": "ngram"}, "speculative_config", "must be a dict"),
        ({"num_speculative_tokens": 4}, "num_speculative_tokens", "needs speculative_model"),
        ({"speculative_model": "a", "speculative_config": {"model": "b"}},
         "speculative_model", "contradicts"),
        ({"speculative_model": "d", "speculative_config": {"quantization": "fp4"}},
         "speculative_config.quantization", "int8, gguf"),
        ({"speculative_model": "d", "tensor_parallel_size": 2},
         "tensor_parallel_size", "tensor_parallel_size=1 only"),
    ],
)  # fmt: skip
def test_bad_config_names_the_field(kwargs: dict, field: str, text: str) -> None:
    with pytest.raises(ValueError, match=text) as info:
        EngineArgs(model="m", **kwargs)
    assert isinstance(info.value, RequestError) and info.value.field == field


def test_draft_vocab_must_match(tiny_model, model_dir) -> None:
    other = model_dir(vocab_size=100)
    args = EngineArgs(model=str(tiny_model), speculative_model=str(other))
    with pytest.raises(ValueError, match="vocabulary must match"):
        args.create_config()
    ok = EngineArgs(model=str(tiny_model), speculative_model=str(tiny_model)).create_config()
    assert ok.speculative.model == str(tiny_model)


def test_cli_flags() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["generate", "hi", "--speculative-config", '{"method": "ngram"}',
         "--num-speculative-tokens", "3"]
    )  # fmt: skip
    out = engine_args(args)
    assert out["speculative_config"] == {"method": "ngram"}
    assert out["num_speculative_tokens"] == 3 and "speculative_model" not in out
    for bad in (["--speculative-config", "[1]"], ["--num-speculative-tokens", "17"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["generate", "hi", *bad])


def test_stats_and_metrics() -> None:
    stats = EngineStats(num_kv_blocks=4, num_free_kv_blocks=4, num_draft_tokens=9,
                        num_accepted_tokens=5)  # fmt: skip
    text = Metrics().render(stats)
    assert "tandem:spec_decode_num_draft_tokens_total 9" in text
    assert "tandem:spec_decode_num_accepted_tokens_total 5" in text
    assert EngineStats().num_draft_tokens == 0
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        EngineStats(num_draft_tokens=1, num_accepted_tokens=2)
