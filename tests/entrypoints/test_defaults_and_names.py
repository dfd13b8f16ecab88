"""What a new user meets first: model names that resolve the same everywhere, a model's own
sampling defaults (its generation_config.json, read as transformers reads it) in ``LLM``,
the CLI and the server, and the prompt an output reports."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tandem.core import LLM, SamplingParams
from tandem.core.catalog import named_models
from tandem.core.cli import main

pytestmark = pytest.mark.engines("v0", "v1")


@pytest.fixture
def sampling_model(tiny_model: Path, tmp_path: Path) -> Path:
    """The tiny model with a generation_config that asks to sample."""
    target = tmp_path / "sampling-model"
    shutil.copytree(tiny_model, target)
    gen = json.loads((target / "generation_config.json").read_text())
    gen.update(do_sample=True, temperature=0.7, top_p=0.9, repetition_penalty=1.1)
    (target / "generation_config.json").write_text(json.dumps(gen))
    return target


def test_defaults_follow_generation_config(sampling_model: Path, tiny_model: Path, engine):
    with LLM(sampling_model, engine=engine, max_model_len=64) as llm:
        d = llm.default_sampling_params()
        # do_sample: its values, and transformers' top_k of 50 where it sets none
        assert (d.temperature, d.top_p, d.top_k, d.repetition_penalty) == (0.7, 0.9, 50, 1.1)
    with LLM(tiny_model, engine=engine, max_model_len=64) as llm:
        d = llm.default_sampling_params()
        assert d.greedy  # no do_sample: greedy, as transformers' generate()
        plain = llm.generate("a b c", use_tqdm=False)[0].outputs[0]
        greedy = llm.generate("a b c", SamplingParams(temperature=0), use_tqdm=False)
        assert plain.token_ids == greedy[0].outputs[0].token_ids


def test_a_bad_generation_config_names_the_file(sampling_model: Path, engine: str) -> None:
    path = sampling_model / "generation_config.json"
    path.write_text(json.dumps({"do_sample": True, "temperature": -1}))
    with pytest.raises(ValueError, match=r"generation_config.json: temperature must be in"):
        LLM(sampling_model, engine=engine, max_model_len=64)


def test_cli_takes_the_model_defaults(sampling_model: Path, engine: str, capsys) -> None:
    argv = ["generate", "--model", str(sampling_model), "--engine", engine]
    argv += ["--max-tokens", "4", "--seed", "3", "--n", "2", "--no-chat", "x y"]
    assert main(argv) == 0
    sampled = capsys.readouterr().out
    with LLM(sampling_model, engine=engine, max_model_len=64) as llm:
        want = llm.generate(
            "x y", llm.default_sampling_params().replace(max_tokens=4, seed=3, n=2), use_tqdm=False
        )
    for comp in want[0].outputs:
        assert f"[{comp.index}] {comp.text!r}" in sampled


def test_names_resolve_the_same_in_python_and_the_cli(monkeypatch, tiny_model: Path, engine):
    asked: list[int] = []

    def fake_make_model(**kwargs: object) -> Path:
        asked.append(kwargs.get("train_steps"))
        return tiny_model

    import tandem.core.testing as testing

    monkeypatch.setattr(testing, "make_model", fake_make_model)
    with LLM("tiny", engine=engine, max_model_len=64) as llm:
        assert llm.engine_args.model == str(tiny_model)
    assert main(["generate", "--model", "TINY", "--engine", engine, "--max-tokens", "2", "a"]) == 0
    assert asked == [named_models.TINY_TRAIN_STEPS] * 2
    assert named_models.served_names("tiny", str(tiny_model)) == ("tiny",)
    # the name typed is announced (none typed: the default's), its aliases answered
    smollm2 = ("smollm2", "SmolLM2-135M-Instruct")
    assert named_models.served_names(None, "/x/SmolLM2.Q4_1.gguf") == smollm2
    assert named_models.served_names("SmolLM2-135M-Instruct", "/x/a.gguf") == smollm2[::-1]
    assert named_models.served_names("SMOLLM2", "/x/a.gguf") == ("SMOLLM2", *smollm2)
    # a path: its name announced, the path as typed answered too
    assert named_models.served_names(str(tiny_model), str(tiny_model)) == (
        tiny_model.name,
        str(tiny_model),
    )
    assert named_models.served_name("/m/SmolLM2.Q4_1.gguf", "/m/SmolLM2.Q4_1.gguf") == (
        "SmolLM2.Q4_1"
    )


def test_an_existing_path_wins_over_a_name(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert named_models.resolve_model("tiny") == "tiny"


@pytest.mark.parametrize(
    ("typed", "near"),
    [("smolm2", "smollm2"), ("SmolLM2-135M-instruc", "SmolLM2-135M-Instruct"), ("tinny", "tiny")],
)
def test_a_wrong_name_lists_what_is_accepted_and_the_nearest(typed, near, engine) -> None:
    with pytest.raises(ValueError) as err:
        LLM(typed, engine=engine)
    text = str(err.value)
    assert err.value.field == "model"
    assert f"model {typed!r} does not exist" in text and f"did you mean {near!r}?" in text
    assert "A model is a directory with config.json, a .gguf file or a name:" in text
    for name in named_models.names():
        assert repr(name) in text


def test_a_mistyped_path_suggests_the_file_beside_it(tmp_path: Path) -> None:
    (tmp_path / "SmolLM2.Q4_1.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="model path does not exist") as err:
        named_models.resolve_model(str(tmp_path / "SmolLM2.Q4_l.gguf"))
    assert f"did you mean {str(tmp_path / 'SmolLM2.Q4_1.gguf')!r}?" in str(err.value)
    with pytest.raises(ValueError) as far:
        named_models.resolve_model(str(tmp_path / "elsewhere" / "model"))
    assert "did you mean" not in str(far.value)  # nothing near: no guess


def test_clamped_max_tokens_keeps_the_prompt(tiny_model: Path, engine: str, caplog) -> None:
    with LLM(tiny_model, engine=engine, max_model_len=16) as llm, caplog.at_level(logging.WARNING):
        out = llm.generate("a b c", SamplingParams(max_tokens=100), use_tqdm=False)[0]
    assert out.prompt == "a b c"
    assert "max_tokens=100 does not fit" in caplog.text
