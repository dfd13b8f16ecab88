"""``tandem serve``'s guard flags: keys (or ``TANDEM_API_KEY``), names, limits, manners."""

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

import pytest

from tandem.core import cli
from tandem.core.cli.serve import server_config


def _config(argv: list[str]):
    args = cli.build_parser().parse_args(["serve", *argv])
    return server_config(args, "default-name")


def test_flags_make_the_server_config(monkeypatch) -> None:
    monkeypatch.delenv("TANDEM_API_KEY", raising=False)
    plain = _config([])
    assert plain.model_names == ("default-name",) and plain.api_keys == ()
    assert plain.max_body_bytes == 16 << 20 and plain.engine_window is None
    assert not plain.strict_fields and not plain.quiet
    cfg = _config(
        [
            "--api-key", "k1", "--api-key", "k2", "--served-model-name", "a", "b",
            "--max-body-bytes", "1000", "--max-prompts", "3", "--max-sequences", "9",
            "--max-waiting", "20", "--engine-window", "5", "--timeout-body", "2.5",
            "--strict-fields", "--quiet",
        ]
    )  # fmt: skip
    assert cfg.api_keys == ("k1", "k2") and cfg.model_names == ("a", "b") and cfg.name == "a"
    assert (cfg.max_body_bytes, cfg.max_prompts, cfg.max_sequences) == (1000, 3, 9)
    assert (cfg.max_waiting, cfg.engine_window, cfg.body_timeout) == (20, 5, 2.5)
    assert cfg.strict_fields and cfg.quiet
    monkeypatch.setenv("TANDEM_API_KEY", "from-env")
    assert _config([]).api_keys == ("from-env",)
    assert _config(["--api-key", "flag"]).api_keys == ("flag",)  # the flag wins


def test_cors_flags_take_vllm_json_lists_or_commas(monkeypatch) -> None:
    plain = _config([])
    assert plain.allowed_origins == () and not plain.allow_credentials  # CORS off
    cfg = _config(
        [
            "--allowed-origins", '["https://a.example", "http://localhost:3000"]',
            "--allowed-methods", "GET,POST", "--allowed-headers", '["content-type"]',
            "--allow-credentials",
        ]
    )  # fmt: skip
    assert cfg.allowed_origins == ("https://a.example", "http://localhost:3000")
    assert cfg.allowed_methods == ("GET", "POST") and cfg.allowed_headers == ("content-type",)
    assert cfg.allow_credentials
    with pytest.raises(ValueError, match="allow_credentials"):
        _config(["--allowed-origins", "*", "--allow-credentials"])


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--allowed-origins", "[1]"], "--allowed-origins: a JSON list of strings"),
        (["--allowed-origins", "a,,b"], "--allowed-origins: an empty name"),
        (["--allowed-methods", "[oops"], "--allowed-methods: not a JSON list"),
        (["--max-prompts", "0"], "--max-prompts must be in"),
        (["--max-body-bytes", "lots"], "--max-body-bytes must be an integer"),
        (["--timeout-keep-alive", "0"], "--timeout-keep-alive must be in"),
        (["--timeout-body", "0"], "--timeout-body must be in"),
        (["--served-model-name"], "--served-model-name"),
    ],
)
def test_bad_guard_flags_are_usage_errors(argv, match, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        cli.main(["serve", *argv])
    assert err.value.code == 2
    assert match in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, key: str | None = None, body: dict | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _serve(model, *flags: str) -> tuple[int, subprocess.Popen[str]]:
    """``tandem serve`` running (``model``: the positional, or ``--model`` and its value)."""
    port = _free_port()
    given = [str(m) for m in model] if isinstance(model, tuple) else [str(model)]
    cmd = [sys.executable, "-m", "tandem.core.cli", "serve", *given, "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, *flags], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    end = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return port, proc
        except OSError:
            assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[str]) -> str:
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


@pytest.mark.slow
@pytest.mark.engines("v1")
def test_serve_with_a_key_names_and_access_log(tiny_model) -> None:
    port, proc = _serve(tiny_model, "--api-key", "sesame", "--served-model-name", "x", "y")
    base = f"http://127.0.0.1:{port}"
    try:
        assert _get(f"{base}/v1/models")[0] == 401
        status, text = _get(f"{base}/v1/models", "sesame")
        assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == ["x"]
        body = {"model": "y", "prompt": "a b", "max_tokens": 2}  # the second name works too
        status, text = _get(f"{base}/v1/completions", "sesame", body)
        assert status == 200 and json.loads(text)["model"] == "x"
    finally:
        err = _stop(proc)
    assert "clients must send 'Authorization: Bearer KEY'" in err
    assert "sesame" not in err  # the key is never logged
    lines = [x for x in err.splitlines() if "POST /v1/completions 200" in x]
    assert len(lines) == 1 and "output_tokens=2" in lines[0] and "ttft=" in lines[0]
    assert any("GET /v1/models 401" in x for x in err.splitlines())


@pytest.mark.slow
@pytest.mark.engines("v1")
def test_serve_quiet_writes_no_access_log(tiny_model) -> None:
    port, proc = _serve(tiny_model, "--quiet")
    try:
        body = {"prompt": "a b", "max_tokens": 2}
        assert _get(f"http://127.0.0.1:{port}/v1/completions", None, body)[0] == 200
    finally:
        err = _stop(proc)
    assert "/v1/completions" not in err


@pytest.mark.slow
@pytest.mark.engines("v1")
def test_serve_by_name_answers_to_that_name() -> None:
    # the name as tandem generate takes it, given with --model; a client uses the same name
    port, proc = _serve(("--model", "tiny"), "--quiet")
    base = f"http://127.0.0.1:{port}"
    try:
        status, text = _get(f"{base}/v1/models")
        assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == ["tiny"]
        body = {"model": "tiny", "prompt": "a b", "max_tokens": 2}
        assert _get(f"{base}/v1/completions", None, body)[0] == 200
        status, text = _get(f"{base}/v1/completions", None, {**body, "model": "tiny2"})
        assert status == 404 and "did you mean 'tiny'?" in text
    finally:
        err = _stop(proc)
    assert "serving 'tiny' on" in err
