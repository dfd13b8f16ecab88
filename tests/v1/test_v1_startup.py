"""Engine v1's start-up path: light payloads, early children, nothing left on failure."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tandem.core.config.engine_args import EngineArgs
from tandem.core.models.architectures import build_spec
from tandem.core.text.tokenizer import TextDecoder, Tokenizer, load_tokenizer
from tandem.v1 import LLMEngine
from tandem.v1.frontend.client import MPClient
from tandem.v1.proc.ipc import read_payload, write_payload
from tandem.v1.proc.payload import core_config, detokenizer_setup, load_decoder, plain_hf_config


def test_plain_config_reads_as_the_same_model(tiny_arch_model: Path) -> None:
    config = EngineArgs(model=str(tiny_arch_model), device="cpu").create_config()
    hf = config.model.hf_config
    plain = plain_hf_config(hf)
    arch = config.model.architecture
    assert build_spec(plain, arch) == build_spec(hf, arch)
    assert plain.model_type == hf.model_type and plain.eos_token_id == hf.eos_token_id
    moved = core_config(config)
    assert moved.model.hf_config is not hf and config.model.hf_config is hf  # a copy
    assert (moved.model.num_layers, moved.model.head_dim, moved.model.eos_token_ids) == (
        config.model.num_layers,
        config.model.head_dim,
        config.model.eos_token_ids,
    )
    assert moved.cache == config.cache and moved.dtype == config.dtype


def test_core_payload_unpickles_without_transformers(tiny_model: Path) -> None:
    config = core_config(EngineArgs(model=str(tiny_model), device="cpu").create_config())
    code = (
        "import pickle, sys\n"
        "cfg = pickle.load(sys.stdin.buffer)\n"
        "print(cfg.model.num_layers, cfg.model.hf_config.vocab_size)\n"
        "assert 'transformers' not in sys.modules\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(config), capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.split() == [b"%d" % config.model.num_layers, b"%d" % config.model.vocab_size]


def test_payload_pipe_round_trip() -> None:
    r, w = os.pipe()
    with os.fdopen(r, "rb") as reader:
        write_payload(os.fdopen(w, "wb"), {"a": [1, 2], "b": "x"})
        assert read_payload(reader) == {"a": [1, 2], "b": "x"}
    r, w = os.pipe()
    os.close(w)
    with os.fdopen(r, "rb") as reader:
        assert read_payload(reader) is None  # closed without a payload


def test_detokenizer_setup(tiny_model: Path) -> None:
    tok = load_tokenizer(tiny_model)
    decoder = load_decoder(detokenizer_setup(tok))
    assert isinstance(decoder, TextDecoder)
    ids = list(range(0, 60, 3))
    assert decoder.decode(ids) == tok.decode(ids)
    with pytest.raises(TypeError, match="tokenizer must be a tandem Tokenizer, got str"):
        detokenizer_setup("gpt2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config must be an EngineConfig, got dict"):
        core_config({})


class _SlowOnly:
    """A tokenizer-like object without a fast backend."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "backend_tokenizer":
            raise AttributeError(name)
        return getattr(self.inner.hf, name)

    def __len__(self) -> int:
        return len(self.inner.hf)


def test_tokenizer_without_fast_backend_is_loaded_in_full(tiny_model: Path) -> None:
    tok = load_tokenizer(tiny_model)
    slow = Tokenizer(_SlowOnly(tok), path=tok.path)
    setup = detokenizer_setup(slow)
    assert setup["decoder"] is None
    assert isinstance(load_decoder(setup), Tokenizer)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _gone(pids: list[int], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p)]
        if all(psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in alive):
            return True
        time.sleep(0.05)
    return False


def test_client_dropped_before_its_payload_leaves_nothing() -> None:
    before, fds = _children(), psutil.Process().num_fds()
    client = MPClient(30.0)
    pids, ipc_dir = list(client.pids.values()), client.ipc_dir
    assert len(pids) == 2 and ipc_dir is not None and os.path.isdir(ipc_dir)
    client.shutdown()
    assert _gone(pids)
    assert not os.path.exists(ipc_dir)
    assert _children() <= before
    assert psutil.Process().num_fds() == fds


def test_bad_model_dir_starts_no_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tandem.v1.frontend.client as client_module

    launched: list[str] = []
    real = client_module.launch

    def launch(role: str, ipc_dir: str) -> Any:
        launched.append(role)
        return real(role, ipc_dir)

    monkeypatch.setattr(client_module, "launch", launch)
    with pytest.raises(ValueError, match="does not exist"):
        LLMEngine.from_engine_args(EngineArgs(model=str(tmp_path / "nope"), device="cpu"))
    assert launched == []


def test_config_error_after_early_start_stops_the_children(tiny_model: Path) -> None:
    """The children start before create_config; its refusal must stop them again."""
    before = _children()
    args = EngineArgs(model=str(tiny_model), device="cpu", max_model_len=10**6)
    with pytest.raises(ValueError, match="max_model_len must be <="):
        LLMEngine.from_engine_args(args)
    assert _children() <= before


def _launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import tandem.v1.frontend.client as client_module

    launched: list[str] = []
    real = client_module.launch

    def launch(role: str, ipc_dir: str) -> Any:
        launched.append(role)
        return real(role, ipc_dir)

    monkeypatch.setattr(client_module, "launch", launch)
    return launched


def test_a_gguf_file_starts_the_children_before_its_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A .gguf file is a checkpoint too: the children import torch and the model code
    while this process reads the file's metadata and tokenizer; a file that then fails
    to read stops them again."""
    launched, before = _launches(monkeypatch), _children()
    seen: list[list[str]] = []
    real = EngineArgs.create_config

    def create_config(self: EngineArgs, names: bool = False) -> Any:
        seen.append(list(launched))
        return real(self, names=names)

    monkeypatch.setattr(EngineArgs, "create_config", create_config)
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(ValueError):
        LLMEngine.from_engine_args(EngineArgs(model=str(bad), device="cpu"))
    assert seen == [["core", "detokenizer"]]
    assert _children() <= before


def test_a_missing_gguf_file_starts_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched = _launches(monkeypatch)
    with pytest.raises(ValueError, match="does not exist"):
        LLMEngine.from_engine_args(EngineArgs(model=str(tmp_path / "nope.gguf"), device="cpu"))
    assert launched == []


GGUF_FILE = Path(__file__).parents[1] / "models" / "gguf_files" / "llama-q4_k_m.gguf"
HEAVY_MODULES = ("torch", "transformers", "numpy")  # none of them loaded in the front


@pytest.mark.parametrize("form", ["hf-directory", "gguf-file"])
def test_front_and_detokenizer_never_import_torch_or_numpy(
    form: str, tiny_model: Path, fresh_python: Callable[[str], None]
) -> None:
    """The front process (``LLM(...)``, ``tandem serve``) and the detokenizer never run
    the model: the front resolves its config to names and loads its tokenizer without
    transformers (whose AutoTokenizer config machinery imports torch: 200+ MiB resident;
    transformers alone ~50 MiB), reads a GGUF file's config without numpy (~15 MiB) or
    the ``gguf`` package, and a request's whole way (chat template, prompt, streamed
    text) leaves torch, transformers and numpy unimported there and unmapped in the
    detokenizer; the core, which runs the model, maps torch and numpy (so the check of
    the maps can see them)."""
    model = tiny_model if form == "hf-directory" else GGUF_FILE
    code = (
        "import sys\n"
        "from tandem.core import LLM, SamplingParams\n"
        "def mapped(pid, library):\n"
        "    with open(f'/proc/{pid}/maps') as maps:\n"
        "        return any(library in line for line in maps)\n"
        f"llm = LLM(model={str(model)!r}, engine='v1', device='cpu', max_model_len=64)\n"
        "try:\n"
        "    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)\n"
        "    llm.chat([{'role': 'user', 'content': 'Hi'}], params, use_tqdm=False)\n"
        "    assert len(list(llm.stream('Hello', params))) > 1\n"
        "    assert (llm.config.device, llm.config.dtype) == ('cpu', 'float32')\n"
        f"    loaded = [m for m in {HEAVY_MODULES!r} if m in sys.modules]\n"
        "    assert not loaded, f'the front imported {loaded}'\n"
        "    assert 'gguf' not in sys.modules, 'the front imported the gguf package'\n"
        "    pids = llm.engine.client.pids\n"
        "    assert mapped(pids['core'], 'libtorch')\n"
        "    assert mapped(pids['core'], '_multiarray_umath')  # numpy's own library\n"
        "    for library in ('libtorch', '_multiarray_umath'):\n"
        "        assert not mapped(pids['detokenizer'], library), f'detokenizer: {library}'\n"
        "finally:\n"
        "    llm.shutdown()\n"
    )
    fresh_python(code)
