"""A command line that guides: whole flag names, the nearest one suggested in the
subcommand's own usage and name, the model given the same way to every subcommand, help
for every flag, and a prompt too long refused before the engine loads."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.core import cli
from tandem.core.cli.engine_kwargs import engine_args
from tandem.core.cli.prompt_fit import check_prompts_fit, shown


def _refused(argv: list[str], capsys) -> str:
    """stderr of a command line the parser refuses (parsed only: nothing runs)."""
    with pytest.raises(SystemExit) as err:
        cli.build_parser().parse_args(argv)
    assert err.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "flag", "meant"),
    [
        (["generate", "--max_tokens", "5", "x"], "--max_tokens", "--max-tokens"),
        (["generate", "x", "--max_model_len=64"], "--max_model_len", "--max-model-len"),
        (["generate", "--temp", "0.5", "x"], "--temp", "--temperature"),  # no prefixes
        (["generate", "--max-tok", "5", "x"], "--max-tok", "--max-tokens"),
        (["generate", "--top", "5", "x"], "--top", "--top-p or --top-k"),
        (["generate", "--ignore-eso", "x"], "--ignore-eso", "--ignore-eos"),
        (["generate", "-n", "2", "x"], "-n", "--n"),
        (["serve", "--prot", "9000"], "--prot", "--port"),
        (["serve", "--served_model_name", "a"], "--served_model_name", "--served-model-name"),
        (["serve", "--api", "k"], "--api", "--api-key"),
    ],
)
def test_a_wrong_flag_gets_its_command_usage_and_the_nearest(argv, flag, meant, capsys) -> None:
    err = _refused(argv, capsys)
    command = argv[0]
    assert err.startswith(f"usage: tandem {command} [options]"), err
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"tandem {command}: error: unrecognized argument {flag};")
    assert f"did you mean {meant}?" in lines[-1]


def test_a_far_flag_is_refused_without_a_guess(capsys) -> None:
    err = _refused(["generate", "--zzzzzz", "x"], capsys)
    assert "unrecognized argument --zzzzzz (see tandem generate --help)" in err
    assert "did you mean" not in err


def test_a_mistyped_command_is_suggested(capsys) -> None:
    err = _refused(["genrate", "x"], capsys)
    assert "tandem: error: argument COMMAND: invalid choice: 'genrate'" in err
    assert "did you mean 'generate'?" in err


def test_every_parser_refuses_prefixes_and_every_flag_has_help() -> None:
    parser = cli.build_parser()
    assert set(parser.commands) == {"generate", "serve", "chat", "cache", "explain"}
    for name, command in [("tandem", parser), *parser.commands.items()]:
        assert command.allow_abbrev is False, name
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and action.help != argparse.SUPPRESS, f"{where} has no help"


def test_quantization_help_says_what_int8_covers(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "int8: the MLP layers, the attention output projection and the LM head in int8" in text
    for flag in ("--max-tokens", "--min-p", "--seed", "--dtype"):
        assert text.split(flag, 2)[-1].split("--", 1)[0].strip(), flag


def _parsed(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "model", "prompts"),
    [
        (["serve", "tiny"], "tiny", None),
        (["serve", "--model", "tiny"], "tiny", None),
        (["serve", "--model", "tiny", "tiny"], "tiny", None),  # the same twice: fine
        (["serve"], None, None),
        (["generate", "tiny", "Hello", "there"], "tiny", ["Hello", "there"]),
        (["generate", "--model", "tiny", "Hello"], "tiny", ["Hello"]),
        (["generate", "Hello", "--max-tokens", "4", "there"], None, ["Hello", "there"]),
        (["generate", "--model", "smollm2", "tiny"], "smollm2", ["tiny"]),  # tiny: the prompt
        (["generate", "smolm2", "Hello"], "smolm2", ["Hello"]),  # the resolver says the rest
        (["generate", "./models/x.gguf", "Hello"], "./models/x.gguf", ["Hello"]),
        (["generate", "tidy", "up"], None, ["tidy", "up"]),  # a word, not a near name
    ],
)
def test_the_model_positional_or_flag(argv, model, prompts) -> None:
    args = _parsed(*argv)
    assert args.model == model
    if prompts is not None:
        assert args.prompts == prompts


def test_a_model_directory_is_a_positional_model(tiny_model: Path) -> None:
    assert _parsed("generate", str(tiny_model), "hi").model == str(tiny_model)
    assert _parsed("generate", str(tiny_model), "hi").prompts == ["hi"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "tiny", "--model", "smollm2"], "as MODEL 'tiny' and as --model 'smollm2'"),
        (["generate", "tiny", "x", "--model", "smollm2"], "as MODEL 'tiny' and as --model"),
        (["generate", "tiny"], "MODEL 'tiny' needs a PROMPT after it"),
        (["serve", "tiny", "smollm2"], "unexpected argument 'smollm2'"),
    ],
)
def test_a_model_given_badly_is_a_usage_error(argv, said, capsys) -> None:
    err = _refused(argv, capsys)
    assert f"tandem {argv[0]}: error: " in err and said in err


def test_a_wrong_model_name_is_refused_with_the_nearest(capsys) -> None:
    # refused before anything loads; the same message as LLM("smolm2")
    assert cli.main(["generate", "smolm2", "Hello"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem generate: error: model 'smolm2' does not exist")
    assert "did you mean 'smollm2'?" in err and "'tiny'" in err


def test_the_cli_leaves_the_context_to_the_engine() -> None:
    # no fixed cap: left out, max_model_len is not passed and the engine picks it
    assert "max_model_len" not in engine_args(_parsed("generate", "x"))
    assert engine_args(_parsed("generate", "x", "--max-model-len", "64"))["max_model_len"] == 64


def _long_model(tiny_model: Path, tmp_path: Path, limit: int) -> Path:
    """The tiny model allowing a context of ``limit`` tokens."""
    target = tmp_path / "long"
    shutil.copytree(tiny_model, target)
    config = json.loads((target / "config.json").read_text())
    config["max_position_embeddings"] = limit
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_prompts_are_held_to_the_context_not_to_4096(tiny_model: Path, tmp_path: Path) -> None:
    from tandem.core.text.tokenizer import load_tokenizer

    model = _long_model(tiny_model, tmp_path, 8192)
    prompt = "word " * 2000
    count = len(load_tokenizer(model).encode(prompt))
    assert 4096 < count < 8192
    check_prompts_fit(str(model), [prompt], None, chat=False)  # the model's own 8192
    with pytest.raises(ValueError) as err:
        check_prompts_fit(str(model), ["short", prompt], 4096, chat=False)
    assert str(err.value).startswith(f"prompt 1 has {count} tokens;")
    assert "--max-model-len N" in str(err.value) and "up to the model's 8192" in str(err.value)
    with pytest.raises(ValueError, match="model's own maximum: shorten the prompt"):
        check_prompts_fit(str(model), [prompt * 2], None, chat=False)
    with pytest.raises(ValueError, match=r"--max-model-len 9000 is more than the model allows"):
        check_prompts_fit(str(model), ["x"], 9000, chat=False)


def test_a_chat_prompt_is_counted_in_its_template(tiny_model: Path) -> None:
    from tandem.core.text.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tiny_model)
    plain = len(tokenizer.encode("hello"))
    chat = len(tokenizer.apply_chat_template([{"role": "user", "content": "hello"}]))
    assert chat > plain
    check_prompts_fit(str(tiny_model), ["hello"], chat + 1, chat=True)
    with pytest.raises(ValueError, match=f"the prompt has {chat} tokens"):
        check_prompts_fit(str(tiny_model), ["hello"], chat, chat=True)


def test_a_long_prompt_is_refused_before_the_engine_loads(tiny_model: Path) -> None:
    prompt = "once upon a time " * 3000  # 51,000 characters
    argv = [sys.executable, "-m", "tandem.core.cli", "generate", str(tiny_model), prompt]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "loading" not in done.stderr  # the engine never started
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tandem generate: error: the prompt has ")
    assert "max_model_len=512" in err[0] and "the model's own maximum" in err[0]
    assert "once upon" not in err[0]  # the prompt is not echoed


def test_a_long_prompt_is_shown_short() -> None:
    assert shown("hello") == "'hello'"
    text = shown("x" * 24_010)
    assert len(text) < 150 and text.endswith("... (24,010 characters)")


def test_the_program_itself_suggests_the_flag() -> None:
    argv = [sys.executable, "-m", "tandem.core.cli", "generate", "--max_tokens", "5", "x"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: tandem generate")
    assert "tandem generate: error: unrecognized argument --max_tokens; did you mean " in (
        done.stderr
    )
