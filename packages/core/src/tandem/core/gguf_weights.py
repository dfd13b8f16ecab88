"""A GGUF file's quantized tensors loaded as stored (``quantization="gguf"``).

:mod:`tandem.core.gguf_checkpoint` converts a GGUF file into a float32 directory once;
this module loads the same model with the linear layers (and the embedding, which tied
logits share) kept in their GGUF blocks (:mod:`tandem.kernels.gguf_blocks`): Q8_0, Q4_0,
Q4_1, Q5_0, Q5_1 and the K-quants Q4_K, Q5_K, Q6_K (a Q4_K_M file's formats) are copied
byte for byte, their rows put in Hugging Face's order (a block row is one output channel, so the
q/k rotary reordering moves whole rows), and rows of fused modules (q, k, v ->
``qkv_proj``) stacked in the module's order (parts in different formats, as a Q4_K_M
file's Q4_K q, k and Q6_K v, as a :class:`~tandem.kernels.gguf_blocks.QuantStack`).
Memory stays near the file's size: the quantized modules get no float weight at all.

A module stays in floats when one of its parts is stored in another format (F32, F16,
a format the kernels do not take), when it is an embedding whose parts differ, or when
it is not a plain linear layer or embedding.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from tandem.core.gguf_checkpoint import ARCHS, hf_name, unpermute
from tandem.core.layers.embedding import Embedding
from tandem.core.layers.linear import Linear
from tandem.core.models.weights import expected_names
from tandem.kernels.gguf_blocks import FORMATS, QuantStack, QuantWeight, block_values


def _rows(t: Any, config: dict[str, Any]) -> np.ndarray:
    """A tensor's rows as stored (quantized: bytes), in Hugging Face's row order."""
    data = np.asarray(t.data)
    permuted = any(a[1] == config["model_type"] and a[2] for a in ARCHS.values())
    name = hf_name(t.name)
    if permuted and name.endswith("q_proj.weight"):
        data = unpermute(data, config["num_attention_heads"])
    elif permuted and name.endswith("k_proj.weight"):
        data = unpermute(data, config["num_key_value_heads"])
    return data


def _plan(model: nn.Module, shards: Any, stored: dict[str, int]) -> dict[str, nn.Module]:
    """Checkpoint names whose module will be kept quantized -> that module."""
    expected = expected_names(model, shards)
    owner = {id(p): m for m in model.modules() for p in m.parameters(recurse=False)}
    groups: dict[int, list[str]] = {}
    modules: dict[int, nn.Module] = {}
    for name, (param, _) in expected.items():
        module = owner[id(param)]
        kept = isinstance(module, (Linear, Embedding)) and param is module.weight
        if kept and name.endswith(".weight"):
            groups.setdefault(id(module), []).append(name)
            modules[id(module)] = module
    plan: dict[str, nn.Module] = {}
    for key, names in groups.items():
        kinds = {stored.get(n) for n in names}
        mixed_ok = isinstance(modules[key], Linear) or len(kinds) == 1
        if all(kind in FORMATS for kind in kinds) and mixed_ok:
            plan.update((n, modules[key]) for n in names)
    return plan


def load_gguf(model: nn.Module, gguf_path: str | os.PathLike[str], device: torch.device) -> int:
    """Build ``model`` (on the meta device) on ``device`` with its GGUF tensors as stored;
    returns how many modules were kept quantized."""
    from gguf import GGUFReader

    from tandem.core.gguf_checkpoint import read_config, tensors
    from tandem.core.models.architectures import architecture

    reader = GGUFReader(str(Path(gguf_path)))
    config = read_config(reader)
    spec = model.spec  # type: ignore[attr-defined]
    shards = architecture(spec.architecture).names(spec)
    stored = {hf_name(t.name): int(t.tensor_type) for t in reader.tensors}
    plan = _plan(model, shards, stored)
    expected = expected_names(model, shards)
    for module in set(plan.values()):
        module.register_parameter("weight", None)  # no float copy is ever made
    model.to_empty(device=device)
    parts: dict[nn.Module, list[tuple[int, int, Tensor]]] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        if name in plan:
            rows = torch.from_numpy(np.array(_rows(t, config), dtype=np.uint8))
            piece = (expected[name][1].offset, stored[name], rows)
            parts.setdefault(plan[name], []).append(piece)
    for module, pieces in parts.items():
        module.use_quantized(_weight(sorted(pieces, key=lambda p: p[0]), device))

    rest = _Only(reader, set(stored) - set(plan))
    model.load_weights(  # type: ignore[attr-defined]
        (name, torch.from_numpy(w)) for name, w in tensors(rest, config)
    )
    kept = len(parts)
    del reader, rest, parts
    _give_back_heap()
    return kept


def _weight(pieces: list[tuple[int, int, Tensor]], device: torch.device) -> Any:
    """A module's (row offset, GGUF type, rows) pieces in row order -> one QuantWeight,
    or a QuantStack with one QuantWeight per run of pieces in the same format."""
    runs: list[tuple[int, list[Tensor]]] = []
    for _, qtype, rows in pieces:
        if runs and runs[-1][0] == qtype:
            runs[-1][1].append(rows)
        else:
            runs.append((qtype, [rows]))
    weights = []
    for qtype, chunks in runs:
        data = torch.cat(chunks).contiguous()
        k = data.shape[1] // FORMATS[qtype][1] * block_values(qtype)
        weights.append(QuantWeight(data.to(device), qtype, data.shape[0], k))
    return weights[0] if len(weights) == 1 else QuantStack(tuple(weights))


def _give_back_heap() -> None:
    """Return the heap the reader's metadata took (~150 MB of small arrays for a 49k-token
    vocabulary) to the system, so the process ends near the file's size (glibc only)."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class _Only:
    """A reader showing only the tensors named (their Hugging Face names)."""

    def __init__(self, reader: Any, names: set[str]) -> None:
        self.fields = reader.fields
        self.tensors = [t for t in reader.tensors if hf_name(t.name) in names]
