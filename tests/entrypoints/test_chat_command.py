"""``tandem chat``: each input line a message, the conversation kept, end of input ends it."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from tandem.core.cli import main
from tandem.core.inputs.sampling_params import SamplingParams

pytestmark = pytest.mark.engines("v0", "v1")


def test_the_conversation_is_kept(tiny_model: Path, llm, engine, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n\nhow are you\n"))
    argv = ["chat", str(tiny_model), "--engine", engine, "--max-tokens", "6"]
    assert main([*argv, "--max-model-len", "128", "--system", "be brief"]) == 0
    printed, said = capsys.readouterr()
    assert f"(engine {engine}, --engine)" in said and "Ctrl-D or Ctrl-C ends the chat" in said
    params = SamplingParams(temperature=0.0, max_tokens=6)
    talk = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    first = llm.chat(talk, params, use_tqdm=False)[0].outputs[0].text
    talk += [{"role": "assistant", "content": first}, {"role": "user", "content": "how are you"}]
    second = llm.chat(talk, params, use_tqdm=False)[0].outputs[0].text
    assert printed == f"{first}\n{second}\n"  # the empty line sent nothing


def test_a_message_too_long_is_refused_and_the_chat_goes_on(
    tiny_model: Path, engine: str, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("word " * 100 + "\nhi\n"))
    argv = ["chat", str(tiny_model), "--engine", engine, "--max-tokens", "2"]
    assert main([*argv, "--max-model-len", "64"]) == 0
    printed, said = capsys.readouterr()
    assert "tandem chat: error:" in said and "max_model_len" in said
    assert printed.count("\n") == 1  # the answer to "hi"


def test_a_model_without_a_template_is_refused(tiny_model: Path, tmp_path, engine, capsys):
    plain = tmp_path / "plain"
    shutil.copytree(tiny_model, plain)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    assert main(["chat", str(plain), "--engine", engine, "--max-model-len", "64"]) == 2
    assert "has no chat template" in capsys.readouterr().err


def test_flags_of_several_completions_are_not_taken(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["chat", "tiny", "--n", "2"])
    assert "unrecognized argument --n" in capsys.readouterr().err
