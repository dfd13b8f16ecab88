from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tandem.core.config.device import dtype_name
from tandem.core.config.engine_args import (
    SUPPORTED_ARCHITECTURES,
    CacheConfig,
    EngineArgs,
    find_weight_files,
    resolve_device,
    resolve_dtype,
)

ModelDirFactory = Callable[..., Path]


def test_create_config_defaults(model_dir: ModelDirFactory) -> None:
    root = model_dir()
    cfg = EngineArgs(model=str(root)).create_config()
    m = cfg.model
    assert m.path == root and m.tokenizer == root and m.architecture == "LlamaForCausalLM"
    assert (m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim) == (2, 4, 2, 16)
    assert (m.hidden_size, m.vocab_size, m.max_model_len) == (64, 512, 256)
    assert m.weight_files == [root / "model.safetensors"]
    assert m.eos_token_ids == [2]
    assert cfg.device == torch.device("cpu") and cfg.dtype == torch.float32 == m.dtype
    assert cfg.seed == 0 and cfg.num_threads is None
    s = cfg.scheduler
    assert (s.max_num_seqs, s.max_num_batched_tokens, s.max_model_len) == (256, 2048, 256)
    assert s.enable_chunked_prefill and s.enable_prefix_caching
    assert cfg.cache.block_size == 16 and cfg.cache.num_kv_blocks is None
    assert cfg.kv_bytes_per_block == 2 * 2 * 2 * 16 * 16 * 4


def test_explicit_head_dim_and_mqa(model_dir: ModelDirFactory) -> None:
    root = model_dir(
        head_dim=32, num_key_value_heads=1, architectures=["Qwen2ForCausalLM"], model_type="qwen2"
    )
    m = EngineArgs(model=str(root)).create_config().model
    assert (m.head_dim, m.num_kv_heads, m.architecture) == (32, 1, "Qwen2ForCausalLM")


def test_eos_ids_from_generation_config(model_dir: ModelDirFactory) -> None:
    root = model_dir(eos_token_id=[2, 5])
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 7]}))
    assert EngineArgs(model=str(root)).create_config().model.eos_token_ids == [2, 5, 7]


def test_sharded_weights(model_dir: ModelDirFactory) -> None:
    root = model_dir(weights="sharded")
    files = EngineArgs(model=str(root)).create_config().model.weight_files
    assert [f.name for f in files] == ["a-00001.safetensors", "a-00002.safetensors"]


def test_max_model_len_and_batched_tokens(model_dir: ModelDirFactory) -> None:
    root = model_dir(max_position_embeddings=4096)
    cfg = EngineArgs(model=str(root), max_model_len=3000).create_config()
    # chunked prefill: the default step, whatever max_model_len is
    assert cfg.model.max_model_len == 3000 and cfg.scheduler.max_num_batched_tokens == 2048
    args = EngineArgs(model=str(root), max_model_len=3000, enable_chunked_prefill=False)
    assert args.create_config().scheduler.max_num_batched_tokens == 3000  # a whole prompt
    args = EngineArgs(model=str(root), max_model_len=1000, enable_chunked_prefill=False)
    assert args.create_config().scheduler.max_num_batched_tokens == 2048
    cfg = EngineArgs(model=str(root), max_num_batched_tokens=64).create_config()
    assert cfg.scheduler.max_num_batched_tokens == 64


def test_tokenizer_dir(model_dir: ModelDirFactory, tokenizer_dir: Path) -> None:
    cfg = EngineArgs(model=str(model_dir()), tokenizer=str(tokenizer_dir)).create_config()
    assert cfg.model.tokenizer == tokenizer_dir


def test_dtype_resolution() -> None:
    class Cfg:
        dtype = "bfloat16"

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_dtype("auto", cpu, Cfg()) == torch.float32
    assert resolve_dtype("auto", cuda, Cfg()) == torch.bfloat16
    assert resolve_dtype("float16", cpu, Cfg()) == torch.float16
    assert resolve_dtype(torch.bfloat16, cpu, Cfg()) == torch.bfloat16
    Cfg.dtype = None
    assert resolve_dtype("auto", cuda, Cfg()) == torch.float16


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(model_dir: ModelDirFactory) -> None:
    with pytest.raises(ValueError, match=r"device='cuda' was requested but CUDA is not available"):
        EngineArgs(model=str(model_dir()), device="cuda").create_config()


# ----- KV cache sizing ---------------------------------------------------------------


def _cache(**kw: object) -> CacheConfig:
    base = dict(
        block_size=16,
        num_kv_blocks=None,
        kv_cache_memory_bytes=None,
        max_num_seqs=4,
        max_model_len=64,
        enable_prefix_caching=True,
    )
    base.update(kw)
    return CacheConfig(**base)  # type: ignore[arg-type]


def test_default_budget_capped_at_full_sequences() -> None:
    c = _cache()
    assert c.blocks_per_seq == 4
    # half of 10**9 bytes would be 500000 blocks; 4 sequences of 4 blocks need 16
    assert c.resolve_num_blocks(1000, available=10**9) == 16 == c.num_kv_blocks


def test_a_sliding_window_bounds_the_blocks_of_a_sequence() -> None:
    # window 8, steps of 8 tokens, blocks of 4: positions p - 7 .. p + 7 span 5 blocks
    c = _cache(block_size=4, sliding_window=8, step_tokens=8)
    assert c.blocks_per_seq == 5  # not the 16 of 64 tokens
    assert c.resolve_num_blocks(1000, 10**9) == 20 and c.null_block == 20
    assert c.allocated_blocks == 21
    full = _cache(block_size=4)
    assert full.resolve_num_blocks(1000, 10**9) == 64 and full.null_block is None
    assert full.allocated_blocks == 64
    assert _cache(block_size=4, sliding_window=8).blocks_per_seq == 16  # whole-prompt steps


def test_default_budget_a_share_of_the_memory_left() -> None:
    c = _cache(max_num_seqs=10**6)
    assert c.resolve_num_blocks(1000, available=100_000) == 50  # half of it
    assert "kv_cache_memory_fraction=0.5 of 100000 bytes" in c.kv_source
    c = _cache(max_num_seqs=10**6, kv_cache_memory_fraction=0.2)
    assert c.resolve_num_blocks(1000, available=100_000) == 20
    with pytest.raises(ValueError, match=r"available must be given"):
        _cache().resolve_num_blocks(1000)


def test_explicit_budget_and_count() -> None:
    assert _cache(kv_cache_memory_bytes=10_000).resolve_num_blocks(100) == 100
    assert _cache(num_kv_blocks=7).resolve_num_blocks(10**9) == 7


def test_budget_too_small() -> None:
    with pytest.raises(
        ValueError,
        match=r"holds 2 blocks of 16 tokens \(kv_cache_memory_bytes=200, 100 bytes per block\), "
        r"but one sequence of max_model_len=64 needs 4; set max_model_len",
    ):
        _cache(kv_cache_memory_bytes=200).resolve_num_blocks(100)
    with pytest.raises(ValueError, match=r"bytes_per_block must be >= 1, got 0"):
        _cache().resolve_num_blocks(0)


# ----- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"model": 3}, TypeError, "model must be a non-empty path"),
        ({"model": ""}, TypeError, "model must be a non-empty path"),
        ({"tokenizer": 1}, TypeError, "tokenizer must be a non-empty path"),
        (
            {"dtype": "float64"},
            ValueError,
            "dtype must be one of auto, float32, float16, bfloat16, got 'float64'",
        ),
        ({"dtype": torch.int8}, ValueError, "dtype must be one of .* got torch.int8"),
        ({"device": "tpu"}, ValueError, "device must be one of auto, cpu, cuda, got 'tpu'"),
        ({"seed": -1}, ValueError, "seed must be >= 0, got -1"),
        ({"seed": 1.5}, TypeError, "seed must be an int, got float"),
        ({"max_model_len": 0}, ValueError, "max_model_len must be >= 1, got 0"),
        ({"block_size": 0}, ValueError, "block_size must be >= 1, got 0"),
        ({"block_size": 12}, ValueError, "block_size must be a power of two, got 12"),
        ({"num_kv_blocks": 0}, ValueError, "num_kv_blocks must be >= 1, got 0"),
        ({"kv_cache_memory_bytes": -5}, ValueError, "kv_cache_memory_bytes must be >= 1"),
        (
            {"kv_cache_memory_fraction": 0.0},
            ValueError,
            r"kv_cache_memory_fraction must be in \(0, 1\], got 0.0",
        ),
        ({"kv_cache_memory_fraction": 1.5}, ValueError, "kv_cache_memory_fraction must be in"),
        ({"kv_cache_memory_fraction": "half"}, TypeError, "kv_cache_memory_fraction must be a"),
        ({"max_num_seqs": 0}, ValueError, "max_num_seqs must be >= 1, got 0"),
        ({"max_num_seqs": True}, TypeError, "max_num_seqs must be an int, got bool"),
        ({"max_num_batched_tokens": 0}, ValueError, "max_num_batched_tokens must be >= 1"),
        ({"enable_prefix_caching": "yes"}, TypeError, "enable_prefix_caching must be a bool"),
        ({"enable_chunked_prefill": 0}, TypeError, "enable_chunked_prefill must be a bool"),
        ({"num_threads": 0}, ValueError, "num_threads must be >= 1, got 0"),
    ],
)
def test_bad_fields(kwargs: dict[str, object], exc: type[Exception], message: str) -> None:
    kwargs.setdefault("model", "/nonexistent")
    with pytest.raises(exc, match=message):
        EngineArgs(**kwargs)  # type: ignore[arg-type]


def test_from_kwargs_names_unknown() -> None:
    with pytest.raises(TypeError, match=r"unknown engine argument.s. colour; allowed: model, "):
        EngineArgs.from_kwargs("/m", colour="red")
    assert EngineArgs.from_kwargs("/m", seed=3).seed == 3


def _write_config(root: Path, text: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / "config.json").write_text(text)
    return root


def test_model_dir_errors(tmp_path: Path, model_dir: ModelDirFactory) -> None:
    def create(path: Path, **kw: object) -> None:
        EngineArgs(model=str(path), **kw).create_config()  # type: ignore[arg-type]

    with pytest.raises(ValueError, match=r"model directory does not exist"):
        create(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"model must be a directory, got a file"):
        create(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no config.json in the model directory"):
        create(tmp_path / "empty")
    with pytest.raises(ValueError, match=r"could not parse .*config.json"):
        create(_write_config(tmp_path / "garbled", "{nope"))
    with pytest.raises(ValueError, match=r"must hold a JSON object, got list"):
        create(_write_config(tmp_path / "list", "[1]"))
    supported = re.escape(", ".join(SUPPORTED_ARCHITECTURES))
    with pytest.raises(ValueError, match=rf"unsupported architecture .*GPT2.*{supported}"):
        create(model_dir(name="gpt2", architectures=["GPT2LMHeadModel"]))
    with pytest.raises(ValueError, match=r"expected \*.safetensors files or model.safetensors"):
        create(model_dir(name="noweights", weights="none"))
    with pytest.raises(ValueError, match=r"max_model_len must be <= 256 .* got 300"):
        create(model_dir(name="long"), max_model_len=300)
    with pytest.raises(ValueError, match=r"tokenizer must be an existing directory"):
        create(model_dir(name="tok"), tokenizer=str(tmp_path / "nope"))
    with pytest.raises(ValueError, match=r"max_num_batched_tokens must be >= max_model_len=256"):
        create(model_dir(name="chunk"), enable_chunked_prefill=False, max_num_batched_tokens=100)
    with pytest.raises(ValueError, match=r"holds 3 blocks of 16 tokens .* needs 16"):
        create(model_dir(name="blocks"), num_kv_blocks=3, max_model_len=256)
    with pytest.raises(ValueError, match=r"holds 0 blocks of 16 tokens .* needs 16"):
        create(model_dir(name="bytes"), kv_cache_memory_bytes=100)  # not one block


def test_shard_index_errors(model_dir: ModelDirFactory) -> None:
    root = model_dir(weights="sharded")
    (root / "a-00002.safetensors").unlink()
    with pytest.raises(ValueError, match=r"names missing shard.s.: a-00002.safetensors"):
        find_weight_files(root)
    (root / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(ValueError, match=r"could not parse .*needs a 'weight_map'"):
        find_weight_files(root)
    (root / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    with pytest.raises(ValueError, match=r"has an empty weight_map"):
        find_weight_files(root)


def test_checking_engine_args_does_not_import_torch(fresh_python) -> None:
    """The v1 front starts its children before it resolves the config: torch's import
    (a second or more) then runs beside theirs instead of before them."""
    code = (
        "import sys\n"
        "from tandem.core.config.engine_args import EngineArgs, DEVICES\n"
        "EngineArgs(model='m', dtype='bfloat16', device='cpu')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from tandem.core.config.engine_args import DTYPES\n"  # the lazy re-exports still resolve
        "assert list(DTYPES) == ['auto', 'float32', 'float16', 'bfloat16']\n"
    )
    fresh_python(code)


def test_reading_the_windows_does_not_import_torch(fresh_python) -> None:
    """The spec of a config (its layers' windows) is read without the model classes."""
    code = (
        "import sys\n"
        "from types import SimpleNamespace\n"
        "from tandem.core.config.hf_defaults import DEFAULTS\n"
        "from tandem.core.models.architectures import build_spec\n"
        "cfg = SimpleNamespace(**DEFAULTS['MistralForCausalLM'])\n"
        "cfg.sliding_window = 4096\n"
        "assert set(build_spec(cfg, 'MistralForCausalLM').windows) == {4096}\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    fresh_python(code)


def test_config_made_with_names_does_not_import_torch(
    model_dir: ModelDirFactory, fresh_python: Callable[[str], None]
) -> None:
    """The v1 front resolves its config to names (``cpu``, ``float32``): its process
    never runs the model, and torch (200+ MiB) stays in the core process."""
    code = (
        "import sys\n"
        "from tandem.core.config.engine_args import EngineArgs\n"
        f"cfg = EngineArgs(model={str(model_dir())!r}, device='cpu').create_config(names=True)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "assert (cfg.device, cfg.dtype, cfg.model.dtype) == ('cpu', 'float32', 'float32')\n"
        "assert cfg.device_type == 'cpu' and cfg.kv_bytes_per_block == 2 * 2 * 2 * 16 * 16 * 4\n"
        "cfg.with_torch()\n"
        "import torch\n"
        "assert (cfg.device, cfg.dtype) == (torch.device('cpu'), torch.float32)\n"
        "assert cfg.model.dtype is torch.float32\n"
    )
    fresh_python(code)


@pytest.mark.parametrize("dtype", ["auto", "float16", "bfloat16"])
def test_config_with_names_becomes_the_torch_config(model_dir: ModelDirFactory, dtype: str) -> None:
    args = EngineArgs(model=str(model_dir()), device="cpu", dtype=dtype)
    named, made = args.create_config(names=True), args.create_config()
    assert isinstance(named.dtype, str) and isinstance(named.device, str)
    assert named.kv_bytes_per_block == made.kv_bytes_per_block
    assert named.with_torch() == made
    assert made.with_torch() == made  # already torch's: kept


def test_dtype_names_resolve_as_the_torch_dtypes() -> None:
    class Cfg:
        dtype = "torch.bfloat16"

    assert dtype_name("auto", "cuda", Cfg()) == "bfloat16"
    Cfg.dtype = torch.float16
    assert dtype_name("auto", "cuda", Cfg()) == "float16"
    Cfg.dtype = "float32"  # float32 checkpoints run in float16 on CUDA
    assert dtype_name("auto", "cuda", Cfg()) == "float16"
    assert dtype_name("auto", "cpu", Cfg()) == "float32"
    assert dtype_name(torch.bfloat16, "cpu", Cfg()) == "bfloat16"
    with pytest.raises(ValueError, match="dtype must be one of auto, float32, float16, bfloat16"):
        dtype_name("float64", "cpu", Cfg())


def test_no_gpu_device_file_means_no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch imported and without a GPU's device file, CUDA is known absent;
    with one, torch is asked."""
    import tandem.core.config.device as device

    monkeypatch.setattr(device, "sys", SimpleNamespace(modules={}))  # as if torch were not in
    monkeypatch.setattr(device, "GPU_DEVICE_FILES", ("/nonexistent/nvidia0",))
    assert device.cuda_available() is False
    assert device.device_name("auto") == "cpu"
    with pytest.raises(ValueError, match="CUDA is not available"):
        device.device_name("cuda")
    monkeypatch.setattr(device, "GPU_DEVICE_FILES", (__file__,))  # a "device" that exists
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device.cuda_available() is True  # torch was asked
    assert device.device_name("auto") == "cuda"
