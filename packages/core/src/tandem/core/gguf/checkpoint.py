"""A GGUF file as a checkpoint: its config, and its tensors under Hugging Face names.

:func:`open_checkpoint` opens the file (memory-mapped), picks the architecture's
:class:`~tandem.core.models.architectures.gguf_names.GGUFNames` and checks, before any
weight is read, that every tensor is known and stored in a type Tandem reads.
:meth:`GGUFCheckpoint.tensors` then yields each tensor as stored (a view of the mapping)
with the Hugging Face name it loads as and what must be undone on the way. Opening a
checkpoint and reading its config imports neither numpy nor the ``gguf`` package (the v1
engine's front does only that); reading its tensors does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tandem.core.gguf.file import GGUFFile
from tandem.core.gguf.types import F16, F32, check_readable
from tandem.core.models.architectures import gguf_names
from tandem.core.models.architectures.gguf_names import GGUFNames, unpermute

if TYPE_CHECKING:
    import numpy as np


# A GGUF file drops a tensor's leading dimensions of 1 (llama.cpp's quantizer writes only up
# to the last dimension above 1): with a single expert the router [1, H] is stored as [H]
# and each stack of experts [1, N, K] as [N, K]; they are read back with their dimension.
ROUTER = "ffn_gate_inp"


@dataclass(frozen=True, slots=True)
class StoredTensor:
    """One checkpoint tensor: its Hugging Face ``name``, GGML ``type`` and ``data`` as
    stored (rows already in Hugging Face's order where the converter moved them);
    ``norm_shift`` is still to be taken off its values."""

    name: str
    type: int
    data: np.ndarray
    norm_shift: float = 0.0

    def floats(self) -> np.ndarray:
        """The values as float32 (dequantized; the norm offset taken off)."""
        import numpy as np

        values = to_float32(self.data, self.type)
        if self.norm_shift:
            values -= np.float32(self.norm_shift)
        return values


def to_float32(data: np.ndarray, kind: int) -> np.ndarray:
    """``data`` as stored in type ``kind`` -> float32 values (a new array)."""
    import numpy as np

    if kind == F32:
        return np.array(data, dtype=np.float32)
    if kind == F16:
        return data.astype(np.float32)
    from gguf.quants import dequantize

    return np.asarray(dequantize(data, kind), dtype=np.float32)


class GGUFCheckpoint:
    """A GGUF file read as a Hugging Face checkpoint (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.file = GGUFFile(path)
        self.path = self.file.path
        self.names: GGUFNames = gguf_names(self.file.architecture)
        self.tensor_names = frozenset(self.file.tensors)
        self.architecture = self.file.architecture
        for name, info in self.file.tensors.items():
            check_readable(info.type, f"{self.path.name}: {self.file.describe(name)}")
            if name not in self.names.ignored:
                self.names.hf_name(name)  # known, or a ValueError naming it
        self.config = self.names.config(self)

    # Metadata (gguf_names.Metadata), for the architecture's config reader
    def value(self, key: str, default: Any = None) -> Any:
        return self.file.value(key, default)

    def count(self, key: str) -> int | None:
        return self.file.count(key)

    def floats(self, name: str) -> list[float]:
        values = self.file.float_values(name)  # F32 and F16 without numpy
        return self._floats(name).reshape(-1).tolist() if values is None else values

    @property
    def hf_architecture(self) -> str:
        return str(self.config["architectures"][0])

    def stored_types(self) -> dict[str, int]:
        """Hugging Face name -> GGML type of every tensor that loads (experts: each)."""
        return {t.name: t.type for t in self.tensors(views_only=True)}

    def tensors(self, views_only: bool = False) -> Iterator[StoredTensor]:
        """Every tensor that loads, under its Hugging Face name, stacked experts one by
        one, the parts of a joined tensor as the one float32 tensor they were cut from;
        ``views_only`` gives names and types only (rows not reordered, joined tensors'
        data left empty)."""
        import numpy as np

        waiting: dict[str, dict[str, np.ndarray]] = {}  # a joined tensor's parts so far
        for name, info in self.file.tensors.items():
            if name in self.names.ignored:
                continue
            hf = self.names.hf_name(name)
            joined = self.names.joined_parts(name)
            if joined is not None:
                parts = waiting.setdefault(hf, {})
                parts[name.split(".", 2)[2]] = np.empty(0) if views_only else self._floats(name)
                if len(parts) == len(joined.parts):
                    del waiting[hf]
                    data = np.empty(0, np.float32)
                    if not views_only:
                        values = [parts[p] for p in joined.parts]
                        data = np.ascontiguousarray(joined.join(values, self.config), np.float32)
                    yield StoredTensor(hf, F32, data)
                continue
            data = self.file.data(name)
            stem = name.split(".")[-2]
            if data.ndim == 1 and (stem in self.names.one_row or stem == ROUTER):
                data = data.reshape(1, -1)
            shift = self.names.norm_shift if hf.endswith("norm.weight") else 0.0
            if "{e}" in hf:
                if data.ndim == 2:  # one expert: its dimension dropped (see ROUTER)
                    data = data[None]
                for e in range(data.shape[0]):
                    yield StoredTensor(hf.format(e=e), info.type, data[e], shift)
                continue
            heads = self.names.rotary_heads(hf, self.config)
            if heads is not None and not views_only:
                data = unpermute(data, heads)
            yield StoredTensor(hf, info.type, data, shift)
        if waiting:
            hf, parts = next(iter(waiting.items()))
            raise ValueError(f"{self.path.name}: {hf} has only some of its parts ({sorted(parts)})")

    def _floats(self, name: str) -> np.ndarray:
        return to_float32(self.file.data(name), self.file.tensors[name].type)


def open_checkpoint(path: str | os.PathLike[str]) -> GGUFCheckpoint:
    """The GGUF file at ``path``, checked (ValueError naming what is wrong)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"GGUF file does not exist: {p}")
    return GGUFCheckpoint(p)


def is_gguf(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.suffix == ".gguf" and p.is_file()
