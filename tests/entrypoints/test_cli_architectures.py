"""The architectures from the command line: ``tandem --help`` lists every one the registry
holds, and ``tandem generate`` / ``tandem serve`` run a windowed and an MoE checkpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tandem.core import cli
from tandem.core.models.architectures import ARCHITECTURES, GGUF_ARCHITECTURES
from tandem.core.testing import make_model

# a window of 8 on every layer (its blocks behind it are freed); top-2 of 4 experts
MODELS = {"windowed": ("mistral_window", {}), "moe": ("mixtral", {"sliding_window": None})}
PROMPT = "once upon a time there was a little model that read a long prompt"


@pytest.mark.parametrize("argv", [["--help"], ["generate", "--help"], ["serve", "--help"]])
def test_help_lists_every_architecture(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    listed = text.split("config.json): ", 1)[1].split(". ", 1)[0].split(", ")
    assert listed == sorted(ARCHITECTURES)
    gguf = text.split("llama.cpp's architectures ", 1)[1].split(". ", 1)[0].split(", ")
    assert gguf == sorted(GGUF_ARCHITECTURES)


def model_dir(kind: str) -> str:
    arch, overrides = MODELS[kind]
    return str(make_model(arch=arch, **overrides))


@pytest.mark.engines("v0", "v1")
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_generate_runs_the_model(kind: str, engine: str, capsys) -> None:
    argv = ["generate", "--model", model_dir(kind), "--engine", engine, "--max-tokens", "24"]
    code = cli.main([*argv, "--temperature", "0", "--ignore-eos", PROMPT])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "finish_reason=length" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if body is not None else {}
    with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=60) as r:
        return json.loads(r.read())


@pytest.mark.slow
@pytest.mark.engines("v0", "v1")
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_serve_answers_a_completion(kind: str, engine: str) -> None:
    path, port = model_dir(kind), _free_port()
    cmd = [sys.executable, "-m", "tandem.core.cli", "serve", path, "--engine", engine]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        end = time.monotonic() + 120
        while True:
            try:
                models = _get(f"{base}/models")["data"]
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()
                time.sleep(0.2)
        body = {"model": models[0]["id"], "prompt": PROMPT, "max_tokens": 24, "temperature": 0}
        got = _get(f"{base}/completions", {**body, "ignore_eos": True})
        assert got["choices"][0]["finish_reason"] == "length"
        assert got["usage"]["completion_tokens"] == 24
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
