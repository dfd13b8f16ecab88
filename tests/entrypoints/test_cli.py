from __future__ import annotations

import pytest

from tandem.core import cli


def test_generate_prints_each_completion(tiny_model_dir, capsys) -> None:
    code = cli.main(
        [
            "generate",
            "--model",
            str(tiny_model_dir),
            "--engine",
            "v0",
            "--max-tokens",
            "3",
            "--n",
            "2",
            "--temperature",
            "0.8",
            "--seed",
            "1",
            "hello",
            "world",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "prompt: 'hello'" in out and "prompt: 'world'" in out
    assert out.count("[0] ") == 2 and out.count("[1] ") == 2


def test_default_model_is_built_in(monkeypatch, tiny_model_dir, capsys) -> None:
    calls = []

    def fake_default() -> str:
        calls.append(1)
        return str(tiny_model_dir)

    monkeypatch.setattr(cli, "_default_model", fake_default)
    assert cli.main(["generate", "--engine", "v0", "--max-tokens", "2", "hi"]) == 0
    assert calls == [1] and "prompt: 'hi'" in capsys.readouterr().out


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


def test_missing_model_dir_is_an_error(tmp_path, capsys) -> None:
    assert cli.main(["generate", "--model", str(tmp_path / "nope"), "--engine", "v0", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err
