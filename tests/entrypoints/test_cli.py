"""``tandem generate`` on both engines (chosen by ``--engine`` or by ``TANDEM_ENGINE``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tandem.core import cli
from tandem.core.catalog import default_model
from tandem.core.inputs.sampling_params import SamplingParams

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
    printed, said = capsys.readouterr()
    assert calls == [1] and "prompt: 'a cat' (chat)" in printed
    assert f"(engine {shared_llm.engine_name}, from $TANDEM_ENGINE)" in said
    # one prompt: its text is printed as it is made, then its finish reason; greedy,
    # as the model's generation_config (no do_sample) asks; through the chat template,
    # as the model has one
    params = SamplingParams(temperature=0.0, max_tokens=5)
    chat = [{"role": "user", "content": "a cat"}]
    comp = shared_llm.chat(chat, params, use_tqdm=False)[0].outputs[0]
    want = f"prompt: 'a cat' (chat)\n{comp.text}\n(finish_reason={comp.finish_reason})\n"
    assert want in printed


def test_no_chat_sends_a_plain_completion(tiny_model, shared_llm, engine: str, capsys) -> None:
    argv = ["generate", str(tiny_model), "--engine", engine, "--max-tokens", "5"]
    assert cli.main([*argv, "--no-chat", "a cat"]) == 0
    printed, said = capsys.readouterr()
    assert f"(engine {engine}, --engine)" in said
    params = SamplingParams(temperature=0.0, max_tokens=5)
    comp = shared_llm.generate("a cat", params, use_tqdm=False)[0].outputs[0]
    assert f"prompt: 'a cat'\n{comp.text}\n(finish_reason={comp.finish_reason})\n" in printed
    # several prompts, printed when all are done: each under its own heading
    assert cli.main([*argv, "--chat", "a cat", "a dog"]) == 0
    printed = capsys.readouterr().out
    chats = [[{"role": "user", "content": p}] for p in ("a cat", "a dog")]
    for prompt, out in zip(("a cat", "a dog"), shared_llm.chat(chats, params, use_tqdm=False)):
        comp = out.outputs[0]
        assert f"prompt: {prompt!r} (chat)\n  {comp.text!r} (finish_reason=" in printed


def test_a_model_without_a_chat_template_gets_plain_prompts(tiny_model, tmp_path, capsys):
    import json
    import shutil

    plain = tmp_path / "plain"
    shutil.copytree(tiny_model, plain)
    config = json.loads((plain / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (plain / "tokenizer_config.json").write_text(json.dumps(config))
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    argv = ["generate", str(plain), "--max-tokens", "2", "--max-model-len", "64"]
    assert cli.main([*argv, "a cat"]) == 0
    assert "prompt: 'a cat'\n" in capsys.readouterr().out
    assert cli.main([*argv, "--chat", "a cat"]) == 2
    assert "chat template" in capsys.readouterr().err


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
        (["generate", "--quantization", "int4", "x"], "invalid choice: 'int4'"),
        (["generate"], "PROMPT"),
        ([], "COMMAND"),
    ],
)
def test_bad_flags_are_usage_errors(argv, match, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    assert err.value.code == 2
    assert match in capsys.readouterr().err


def test_quantization_int8_generates(tiny_model, engine: str, capsys) -> None:
    argv = ["generate", "--model", str(tiny_model), "--engine", engine, "--max-tokens", "4"]
    argv += ["--quantization", "int8", "--ignore-eos", "hello"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "prompt: 'hello'" in out and "finish_reason=length" in out


def test_missing_model_dir_is_an_error(tmp_path, engine: str, capsys) -> None:
    code = cli.main(["generate", "--model", str(tmp_path / "nope"), "--engine", engine, "x"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("tandem generate: error: model path does not exist")
    assert "a directory with config.json, a .gguf file or a name: 'smollm2'" in err


def _session_left(sid: int) -> list[str]:
    import psutil

    left = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(p.info["cmdline"] or []))
        except (OSError, psutil.Error):
            continue
    return left


def _wait_gone(sid: int, limit: float = 15.0) -> list[str]:
    end = time.monotonic() + limit
    while (left := _session_left(sid)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def _cli(*args: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tandem.core.cli", *args]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


@pytest.mark.slow
def test_ctrl_c_ends_generate_in_one_line(tiny_model, engine: str) -> None:
    proc = _cli(
        "generate",
        "--model",
        str(tiny_model),
        "--engine",
        engine,
        "--max-model-len",
        "512",
        "--max-tokens",
        "500",
        "--ignore-eos",
        "--n",
        "128",  # 64k tokens: still generating at 4 s on a fast machine
        "once upon a time",
    )
    time.sleep(4)  # loading or generating: either way Ctrl-C must end it cleanly
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.strip().splitlines()[-1] == "tandem generate: interrupted"
    assert "Traceback" not in err and "Terminate" not in err
    assert _wait_gone(proc.pid) == []


@pytest.mark.slow
def test_serve_answers_the_openai_client_and_stops_on_ctrl_c(tiny_model, engine: str) -> None:
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _cli("serve", str(tiny_model), "--engine", engine, "--port", str(port))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        end = time.monotonic() + 120
        while True:
            try:
                models = client.models.list().data
                break
            except openai.APIConnectionError:
                assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()
                time.sleep(0.2)
        assert models[0].id == tiny_model.name
        got = client.completions.create(model=models[0].id, prompt="a b", max_tokens=4)
        assert got.choices[0].finish_reason in ("stop", "length")
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"serving '{tiny_model.name}' on http://127.0.0.1:{port}" in err
    assert "Traceback" not in err
    assert _wait_gone(proc.pid) == []


def test_max_tokens_that_does_not_fit_is_a_visible_clamp(tiny_model, engine: str, capsys):
    argv = ["generate", "--model", str(tiny_model), "--engine", engine, "--max-model-len", "16"]
    assert cli.main([*argv, "--max-tokens", "100", "--ignore-eos", "a b c"]) == 0
    captured = capsys.readouterr()
    assert "max_tokens=100 does not fit" in captured.err and "generating at most" in captured.err
    assert "finish_reason=length" in captured.out


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as err:
        cli.main(["--version"])
    assert err.value.code == 0
    assert capsys.readouterr().out.startswith("tandem ")


def test_serve_on_a_taken_port_is_an_error_before_loading(tmp_path, capsys) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # the model does not exist: had the port been checked after loading, the error
        # would be about the model
        code = cli.main(["serve", str(tmp_path / "nope"), "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err
    assert "serving" not in err


def test_serve_whose_engine_cannot_start_says_why(tiny_model, engine: str, tmp_path, capsys):
    """Weights only the engine reads (in this process for v0, in its core process for v1)
    that do not load: exit 2, and stderr names the exception, type and message."""
    pytest.importorskip("fastapi")
    from proc_watch import descendants, wait_gone

    bad = tmp_path / "bad"
    shutil.copytree(tiny_model, bad)
    for weights in bad.glob("*.safetensors"):
        weights.write_bytes(b"\0" * 64)
    before = descendants()
    code = cli.main(["serve", str(bad), "--engine", engine, "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2, err
    line = next(x for x in err.splitlines() if x.startswith("tandem serve: error:"))
    assert "SafetensorError: Error while deserializing header" in line, err
    where = "engine v1: the core process" if engine == "v1" else "the engine failed to start"
    assert where in line and "its traceback (last lines):" in err
    assert "serving" not in err
    assert wait_gone(descendants() - before) == []


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen[str], port: int) -> None:
    import urllib.request

    end = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()
            time.sleep(0.2)


def _stream_lines(port: int, body: dict, lines: list[bytes]) -> None:
    import json
    import urllib.request

    data = json.dumps({**body, "stream": True}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", data, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            lines.extend(line for line in resp if line.strip())
    except OSError as exc:
        lines.append(repr(exc).encode())


@pytest.mark.slow
def test_sigterm_with_a_stream_in_flight_is_clean(tiny_model, engine: str) -> None:
    import threading

    port = _free_port()
    proc = _cli(
        "serve", str(tiny_model), "--engine", engine, "--port", str(port),
        "--shutdown-timeout", "1",
    )  # fmt: skip
    lines: list[bytes] = []
    try:
        _wait_healthy(proc, port)
        body = {"prompt": "a b", "max_tokens": 400, "n": 16, "ignore_eos": True}
        reader = threading.Thread(target=_stream_lines, args=(port, body, lines))
        reader.start()
        while not lines:  # the stream has begun
            time.sleep(0.05)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # how a service manager stops a server
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - started
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert err.count("tandem serve: stopping (SIGTERM)") == 1, err
    assert "Traceback" not in err and "Terminate" not in err and "ERROR" not in err, err
    assert took < 15, took
    assert lines[-1] == b"data: [DONE]\n", lines[-3:]  # ended, with an error event or not
    assert _wait_gone(proc.pid) == []


@pytest.mark.slow
@pytest.mark.engines("v1")
def test_serve_exits_when_the_engine_dies(tiny_model) -> None:
    import psutil

    port = _free_port()
    proc = _cli("serve", str(tiny_model), "--engine", "v1", "--port", str(port))
    try:
        _wait_healthy(proc, port)
        core = [c for c in psutil.Process(proc.pid).children() if "core" in c.cmdline()]
        core[0].kill()  # no request in flight: the idle server notices by itself
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err
    assert "tandem serve: exiting: the engine failed" in err and "killed by SIGKILL" in err
    assert "Traceback" not in err
    assert _wait_gone(proc.pid) == []
