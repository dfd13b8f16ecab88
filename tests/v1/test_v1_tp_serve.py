"""The OpenAI-compatible server over a tensor-parallel engine, asked by the ``openai``
client: in this process (``AsyncLLM``), and as ``tandem serve --tensor-parallel-size 2``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from proc_watch import wait_gone

from tandem.core.inputs.sampling_params import SamplingParams

EOS = {"ignore_eos": True}


@pytest.mark.slow
def test_the_server_answers_the_openai_client(tiny_dir: Path) -> None:
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    from tandem.core import LLM
    from tandem.core.entrypoints.async_llm import AsyncLLM
    from tandem.core.server import running_server

    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    with LLM(tiny_dir, engine="v1", max_model_len=128) as llm:
        want = llm.generate("a b c", greedy, use_tqdm=False)[0].outputs[0].text
    with AsyncLLM(tiny_dir, engine="v1", max_model_len=128, tensor_parallel_size=2) as llm:
        assert len([n for n in llm.engine.client.pids if "rank" in n]) == 2
        with (
            running_server(llm, "tiny") as url,  # type: ignore[arg-type]
            openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client,
        ):
            got = client.completions.create(
                model="tiny", prompt="a b c", max_tokens=6, temperature=0, extra_body=EOS
            )
            chat = client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3
            )
    assert got.choices[0].text == want
    assert chat.choices[0].finish_reason in ("stop", "length")


def _one_process(tiny_dir: Path) -> str:
    from tandem.core import LLM

    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    with LLM(tiny_dir, engine="v0", max_model_len=128) as llm:  # in this process
        return llm.generate("a b c", greedy, use_tqdm=False)[0].outputs[0].text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tandem_serve_with_two_ranks(tiny_dir: Path) -> None:
    """``tandem serve --tensor-parallel-size 2`` answers with the tokens of one process."""
    openai = pytest.importorskip("openai")
    pytest.importorskip("fastapi")
    port = _free_port()
    cmd = [sys.executable, "-m", "tandem.core.cli", "serve", str(tiny_dir), "--engine", "v1"]
    cmd += ["--port", str(port), "--tensor-parallel-size", "2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        end = time.monotonic() + 180
        while True:
            try:
                models = client.models.list().data
                break
            except openai.APIConnectionError:
                assert proc.poll() is None and time.monotonic() < end
                time.sleep(0.3)
        got = client.completions.create(
            model=models[0].id, prompt="a b c", max_tokens=6, temperature=0, extra_body=EOS
        )
        assert got.choices[0].text == _one_process(tiny_dir)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert wait_gone([proc.pid]) == []
