"""How an architecture is spelled in a GGUF file, and how to read it back.

llama.cpp's converter renames a checkpoint's tensors (``model.layers.3.mlp.up_proj`` ->
``blk.3.ffn_up``), moves its config into metadata under the architecture's own prefix
(``llama.block_count``) and changes a few tensors on the way (interleaved rotary rows,
norm weights with the offset folded in, experts stacked into one tensor). Each family
module declares a :class:`GGUFNames` for the GGUF architectures it reads; the GGUF loader
(:mod:`tandem.core.gguf`) undoes the changes with it and hands the tensors on under their
Hugging Face names, as a safetensors checkpoint would give them.

Torch-free: reading a file's config needs none of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

# outside the layers, every architecture alike
TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# inside a layer, the stems most architectures share (a family overrides or adds)
LAYER = {
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
# the stacked experts' stems ([experts, rows, columns] in one tensor), and the router
EXPERTS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


class Metadata(Protocol):
    """What a config reader sees of a file: its metadata and its tensors' names."""

    architecture: str
    tensor_names: frozenset[str]

    def value(self, key: str, default: Any = None) -> Any: ...

    def count(self, key: str) -> int | None: ...

    def floats(self, name: str) -> list[float]: ...


def arch_value(meta: Metadata, key: str, default: Any = None) -> Any:
    """``{architecture}.{key}`` of the file's metadata."""
    return meta.value(f"{meta.architecture}.{key}", default)


def arch_int(meta: Metadata, key: str, default: int | None = None) -> int:
    value = arch_value(meta, key, default)
    if isinstance(value, list):  # a per-layer list where every layer agrees
        if len(set(value)) != 1:
            raise ValueError(
                f"GGUF metadata {meta.architecture}.{key} varies by layer ({value[:8]}...), "
                "which this architecture does not take"
            )
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(
            f"GGUF metadata {meta.architecture}.{key} must be an integer, got {value!r}"
        )
    return value


def f32(value: float) -> float:
    """A float the file holds as float32, as the shortest decimal that rounds to it
    (1e-05, not 9.999999747378752e-06)."""
    import struct

    rounded = struct.unpack("<f", struct.pack("<f", value))[0]
    for digits in range(1, 18):
        text = f"{rounded:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == rounded:
            return float(text)
    return float(rounded)


def rope_parameters(meta: Metadata, theta_default: float = 10000.0) -> dict[str, Any]:
    """``rope_parameters`` from the rope metadata (base, and linear or YaRN scaling)."""
    theta = f32(arch_value(meta, "rope.freq_base", theta_default))
    kind = arch_value(meta, "rope.scaling.type", "none")
    factor = arch_value(meta, "rope.scaling.factor")
    if kind in ("none", None) or not factor:
        if "rope_freqs.weight" in meta.tensor_names:  # llama 3: per-frequency divisors
            freqs = meta.floats("rope_freqs.weight")
            return {
                "rope_type": "longrope",
                "rope_theta": theta,
                "short_factor": freqs,
                "long_factor": freqs,
                "factor": 1.0,
                "attention_factor": 1.0,
                "original_max_position_embeddings": arch_int(meta, "context_length"),
            }
        return {"rope_type": "default", "rope_theta": theta}
    params: dict[str, Any] = {"rope_type": kind, "rope_theta": theta, "factor": f32(factor)}
    original = arch_value(meta, "rope.scaling.original_context_length")
    if original:
        params["original_max_position_embeddings"] = int(original)
    for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        value = arch_value(meta, f"rope.scaling.{key}") if kind == "yarn" else None
        if value is not None:
            params[name] = f32(value)
    if kind not in ("linear", "yarn"):
        raise ValueError(f"GGUF rope scaling {kind!r} is not read; linear and yarn are")
    return params


def base_config(meta: Metadata, architecture: str, model_type: str) -> dict[str, Any]:
    """The config.json fields every architecture reads the same way."""
    hidden = arch_int(meta, "embedding_length")
    heads = arch_int(meta, "attention.head_count")
    vocab = arch_value(meta, "vocab_size") or meta.count("tokenizer.ggml.tokens")
    if not vocab:
        raise ValueError("GGUF metadata has no vocab_size and no tokenizer.ggml.tokens")
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": arch_int(meta, "feed_forward_length", 0),
        "num_hidden_layers": arch_int(meta, "block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": arch_int(meta, "attention.head_count_kv", heads),
        "head_dim": arch_int(meta, "attention.key_length", hidden // heads),
        "max_position_embeddings": arch_int(meta, "context_length"),
        "rms_norm_eps": f32(arch_value(meta, "attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_parameters": rope_parameters(meta),
        "vocab_size": int(vocab),
        "tie_word_embeddings": "output.weight" not in meta.tensor_names,
        "torch_dtype": "float32",
    }
    original = config["rope_parameters"].get("original_max_position_embeddings")
    if original is not None:  # read before rope_parameters' own (a family's default)
        config["original_max_position_embeddings"] = original
    for key, name in (("bos", "bos"), ("eos", "eos"), ("padding", "pad")):
        value = meta.value(f"tokenizer.ggml.{key}_token_id")
        if value is not None:
            config[f"{name}_token_id"] = int(value)
    return config


def window_of(meta: Metadata) -> int | None:
    value = arch_value(meta, "attention.sliding_window")
    return int(value) if value else None


@dataclass(frozen=True, slots=True)
class Joined:
    """A Hugging Face tensor the converter cut into several tensors of a layer: their
    ``parts`` (``stem.suffix``, e.g. ``attn_k_b.weight``) and ``join(values, config)``,
    which puts their float32 values (in ``parts`` order) back together."""

    parts: tuple[str, ...]
    join: Callable[[list[Any], Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class GGUFNames:
    """One GGUF architecture: ``name`` (``general.architecture``), ``config`` (metadata ->
    config.json fields, ``architectures`` included), ``layer`` (a layer's tensor stems ->
    Hugging Face module paths inside ``model.layers.N``; stacked experts map to a path
    with ``{e}``; a key ``stem.suffix`` maps that one tensor to a whole path, for a
    parameter renamed on the way), and what the converter changed: ``rotary_rows`` (q/k
    rows interleaved per head; undone), ``norm_shift`` (added to every ``*norm.weight``;
    taken off), ``joined`` (Hugging Face paths inside a layer, with their leaf -> the
    :class:`Joined` parts they were cut into), ``one_row`` (stems Hugging Face keeps as
    one row [1, n] that a file may hold as a vector [n]), ``ignored`` (tensor names that
    are derived state, read by ``config`` if at all)."""

    name: str
    config: Callable[[Metadata], dict[str, Any]]
    layer: Mapping[str, str] = field(default_factory=lambda: dict(LAYER))
    rotary_rows: bool = False
    norm_shift: float = 0.0
    joined: Mapping[str, Joined] = field(default_factory=dict)
    one_row: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ("rope_freqs.weight",)

    def hf_name(self, name: str) -> str:
        """The Hugging Face name of tensor ``name`` (``{e}`` where it stacks experts; for
        a part of a :class:`Joined` tensor, the joined tensor's); ValueError for a tensor
        this architecture does not know."""
        parts = name.split(".")
        if parts[0] == "blk" and len(parts) == 4:
            tail = f"{parts[2]}.{parts[3]}"
            if tail in self.layer:
                return f"model.layers.{parts[1]}.{self.layer[tail]}"
            if parts[2] in self.layer:
                return f"model.layers.{parts[1]}.{self.layer[parts[2]]}.{parts[3]}"
            for path, joined in self.joined.items():
                if tail in joined.parts:
                    return f"model.layers.{parts[1]}.{path}"
        if len(parts) == 2 and parts[0] in TOP:
            return f"{TOP[parts[0]]}.{parts[1]}"
        raise ValueError(
            f"GGUF tensor {name!r} is not part of a {self.name!r} model as Tandem reads it"
        )

    def joined_parts(self, name: str) -> Joined | None:
        """The :class:`Joined` tensor ``name`` is a part of, or None."""
        tail = ".".join(name.split(".")[2:])
        return next((j for j in self.joined.values() if tail in j.parts), None)

    def rotary_heads(self, hf: str, config: Mapping[str, Any]) -> int | None:
        """Heads whose rows to put back in Hugging Face's rotary order (None: leave)."""
        if not self.rotary_rows:
            return None
        if hf.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            return int(config["num_attention_heads"])
        if hf.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            return int(config["num_key_value_heads"])
        return None


def unpermute(w: Any, heads: int) -> Any:
    """Undo llama.cpp's rotary row order for a q/k projection: w [heads * D, ...].

    llama.cpp stores each head's rows as interleaved (even, odd) pairs; Hugging Face keeps
    the first half of the rotary dims, then the second half."""
    d = w.shape[0] // heads
    return w.reshape(heads, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
