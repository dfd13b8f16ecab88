"""``tandem generate`` on both engines (chosen by ``--engine`` or by ``TANDEM_ENGINE``)."""

from __future__ import annotations

import pytest

from tandem.core import cli, default_model
from tandem.core.sampling_params import SamplingParams

pytestmark = pytest.mark.engines("v0", "v1")


def test_generate_prints_each_completion(tiny_model, engine: str, capsys) -> None:
    argv = ["generate", "--model", str(tiny_model), "--engine", engine, "--max-tokens", "3"]
    argv += ["--n", "2", "--temperature", "0.8", "--seed", "1", "hello", "world"]
    code = cli.main(argv)
    out = capsys.readouterr().out
    assert code == 0
    assert "prompt: 'hello'" in out and "prompt: 'world'" in out
    assert out.count("[0] ") == 2 and out.count("[1] ") == 2
    assert out.count("finish_reason=length") == 4


def test_defaults_built_in_model_and_engine_from_env(
    monkeypatch, tiny_model, shared_llm, capsys
) -> None:
    # no --model: the built-in model (faked here: it is trained on first use);
    # no --engine: the harness's TANDEM_ENGINE picks the engine, as for LLM(engine=None)
    calls = []

    def fake_default(say) -> str:
        calls.append(1)
        return str(tiny_model)

    monkeypatch.setattr(default_model, "default_model", fake_default)
    assert cli.main(["generate", "--max-tokens", "5", "a cat"]) == 0
    printed = capsys.readouterr().out
    assert calls == [1] and "prompt: 'a cat'" in printed
    params = SamplingParams(temperature=0.0, max_tokens=5)
    comp = shared_llm.generate("a cat", params, use_tqdm=False)[0].outputs[0]
    assert f"  {comp.text!r} (finish_reason={comp.finish_reason})" in printed


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["generate", "--max-tokens", "0", "x"], "--max-tokens must be in"),
        (["generate", "--max-tokens", "two", "x"], "--max-tokens must be an integer"),
        (["generate", "--temperature", "-1", "x"], "--temperature must be in"),
        (["generate", "--top-p", "0", "x"], "--top-p must be in"),
        (["generate", "--top-k", "-2", "x"], "--top-k must be in"),
        (["generate", "--n", "0", "x"], "--n must be in"),
        (["generate", "--engine", "v9", "x"], "invalid choice: 'v9'"),
        (["generate"], "PROMPT"),
        ([], "COMMAND"),
    ],
)
def test_bad_flags_are_usage_errors(argv, match, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    assert err.value.code == 2
    assert match in capsys.readouterr().err


def test_missing_model_dir_is_an_error(tmp_path, engine: str, capsys) -> None:
    code = cli.main(["generate", "--model", str(tmp_path / "nope"), "--engine", engine, "x"])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_prompt_too_long_is_an_error_not_a_crash(tiny_model, engine: str, capsys) -> None:
    long_prompt = " ".join(["word"] * 400)
    argv = ["generate", "--model", str(tiny_model), "--engine", engine, long_prompt]
    assert cli.main(argv) == 2
    assert "max_model_len" in capsys.readouterr().err
