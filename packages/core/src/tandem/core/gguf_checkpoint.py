"""GGUF checkpoints (llama.cpp's format) turned into a Hugging Face model directory.

A ``.gguf`` file holds the config as metadata, the tokenizer and quantized tensors.
:func:`convert` writes what every other part of Tandem reads: ``config.json`` (a
transformers ``LlamaConfig`` from the metadata), ``model.safetensors`` (every tensor
dequantized with the ``gguf`` package to float32, the names mapped back to Hugging
Face's, and the query/key rows put back in Hugging Face's rotary order, which llama.cpp's
converter interleaves), ``generation_config.json`` and the tokenizer (transformers'
own GGUF tokenizer reader, chat template included). :func:`materialize` does it once per
file, cached under ``TANDEM_CACHE_DIR/models`` by the file's size, time and name, and
atomically (built in a temp dir, then renamed).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

STAMP = "tandem_gguf.json"
FORMAT_VERSION = 1
# GGUF architecture -> (the Hugging Face class, its model_type, whether llama.cpp's
# converter interleaved the q/k rows: it does for Llama's rotary order; Qwen's rope
# rotates halves, which llama.cpp runs as is)
ARCHS: dict[str, tuple[str, str, bool]] = {
    "llama": ("LlamaForCausalLM", "llama", True),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", False),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", False),
}
SUPPORTED = tuple(ARCHS)

_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
}
_TOP = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


def is_gguf(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.suffix == ".gguf" and p.is_file()


def hf_name(name: str) -> str:
    """The Hugging Face name of a GGUF tensor (``blk.3.attn_q.weight`` -> ``model.layers
    .3.self_attn.q_proj.weight``); ValueError for one this reader does not know."""
    parts = name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _LAYER:
        return f"model.layers.{parts[1]}.{_LAYER[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP:
        return f"{_TOP[parts[0]]}.{parts[1]}"
    raise ValueError(f"GGUF tensor {name!r} has no Hugging Face counterpart here")


def unpermute(w: Any, heads: int) -> Any:
    """Undo llama.cpp's rotary row order for a q/k projection: w [heads * D, C].

    llama.cpp stores each head's rows as interleaved (even, odd) pairs; Hugging Face keeps
    the first half of the rotary dims, then the second half.
    """
    rows = w.shape[0]
    d = rows // heads
    return w.reshape(heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def _f32(value: Any) -> float:
    """A float GGUF stored as float32, as the shortest decimal that rounds to it (1e-05)."""
    import numpy as np

    return float(str(np.float32(value)))


def read_config(reader: Any) -> dict[str, Any]:
    """The ``config.json`` fields of a GGUF file (one of :data:`ARCHS`), from its metadata."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED:
        raise ValueError(
            f"GGUF architecture {arch!r} is not supported; supported: {', '.join(SUPPORTED)}"
        )
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    names = {t.name for t in reader.tensors}
    tokens = _field(reader, "tokenizer.ggml.tokens") or []
    vocab = int(_field(reader, f"{arch}.vocab_size", len(tokens)))
    cls, model_type, _ = ARCHS[arch]
    head_dim = _field(reader, f"{arch}.attention.key_length")  # Qwen3: not hidden / heads
    if head_dim is None:
        head_dim = _field(reader, f"{arch}.rope.dimension_count", hidden // heads)
    config = {
        "architectures": [cls],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": int(_field(reader, f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(head_dim),
        "max_position_embeddings": int(_field(reader, f"{arch}.context_length")),
        "rms_norm_eps": _f32(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": _f32(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "vocab_size": vocab,
        "tie_word_embeddings": "output.weight" not in names,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    for key in ("bos", "eos", "padding"):
        value = _field(reader, f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            config[f"{'pad' if key == 'padding' else key}_token_id"] = int(value)
    return config


def tensors(reader: Any, config: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(Hugging Face name, float32 numpy array) of every tensor, dequantized."""
    import numpy as np
    from gguf.quants import dequantize

    permuted = any(entry[1] == config["model_type"] and entry[2] for entry in ARCHS.values())
    for t in reader.tensors:
        name = hf_name(t.name)
        w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)  # a writable copy
        if permuted and name.endswith("q_proj.weight"):
            w = unpermute(w, config["num_attention_heads"])
        elif permuted and name.endswith("k_proj.weight"):
            w = unpermute(w, config["num_key_value_heads"])
        yield name, w


def convert(
    gguf_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    say: Callable[[str], None] = lambda _: None,
) -> Path:
    """Write the Hugging Face directory of ``gguf_path`` into ``out_dir`` (created)."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ImportError(
            "reading a .gguf checkpoint needs the 'gguf' package: pip install gguf"
        ) from None
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    src, out = Path(gguf_path), Path(out_dir)
    reader = GGUFReader(str(src))
    config = read_config(reader)
    out.mkdir(parents=True, exist_ok=True)
    say(f"dequantizing {len(reader.tensors)} tensors of {src.name}")
    state = {name: torch.from_numpy(w) for name, w in tensors(reader, config)}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    gen = {k: config[k] for k in ("bos_token_id", "eos_token_id") if k in config}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    say("reading the tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    tokenizer.save_pretrained(str(out))
    return out


def source_of(directory: str | os.PathLike[str]) -> Path | None:
    """The GGUF file a directory was converted from (None: not a converted directory, or
    its file is gone)."""
    stamp = Path(directory) / STAMP
    try:
        source = Path(json.loads(stamp.read_text())["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return source if is_gguf(source) else None


def _digest(path: Path) -> str:
    stat = path.stat()
    key = f"{FORMAT_VERSION}:{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def materialize(
    gguf_path: str | os.PathLike[str], say: Callable[[str], None] = lambda _: None
) -> Path:
    """The converted directory of ``gguf_path``, converting it on first use (cached)."""
    from tandem.core import envs

    # absolute: the stamp must find the file again from any working directory
    src = Path(gguf_path).expanduser().resolve()
    if not is_gguf(src):
        raise ValueError(f"not a .gguf file: {src}")
    root = Path(envs.TANDEM_CACHE_DIR).expanduser() / "models"
    target = root / f"gguf-{src.stem}-{_digest(src)}"
    if (target / STAMP).is_file():
        if source_of(target) != src:  # a stamp of an older version, with a relative path
            _stamp(target, src)
        return target
    root.mkdir(parents=True, exist_ok=True)
    say(f"converting {src.name} into a Hugging Face directory (once): {target}")
    tmp = Path(tempfile.mkdtemp(prefix=".gguf-", dir=root))
    try:
        convert(src, tmp, say)
        _stamp(tmp, src)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: use its copy
            if not (target / STAMP).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _stamp(directory: Path, src: Path) -> None:
    (directory / STAMP).write_text(json.dumps({"source": str(src), "version": FORMAT_VERSION}))
