"""A GGUF file read in place: its header parsed, its tensors views of one memory map.

The file is mapped copy-on-write (``ACCESS_COPY``): every tensor is a numpy view of the
mapping, so the operating system pages weights in from the file as they are read and a
weight kept as stored costs no copy; a view can be handed to torch without a warning, and
nothing ever writes the file. Only the header is parsed on open; long string arrays (a
tokenizer's vocabulary and merges) are skipped and parsed on first use. The header and
the metadata are read without numpy (the v1 engine's front reads a file's config and
never its weights); tensor views import it.

Layout (GGUF versions 2 and 3, little-endian): magic ``GGUF``, version, tensor count,
metadata count, the metadata (key, type, value), the tensor infos (name, dimensions with
the fastest first, type, offset), then the tensor data from the next ``general.alignment``
boundary (32 bytes by default).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tandem.core.gguf.types import F16, F32, row_bytes, type_name

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"GGUF"
_SCALARS = {  # metadata value type -> struct code
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_EAGER_ITEMS = 64  # arrays up to this long are parsed with the header


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as stored: ``shape`` in numpy order (rows first), its GGML ``type``, and
    ``offset``, its first byte in the file."""

    name: str
    shape: tuple[int, ...]
    type: int
    offset: int

    @property
    def nbytes(self) -> int:
        rows = math.prod(self.shape[:-1])
        return rows * row_bytes(self.type, self.shape[-1])


@dataclass(frozen=True, slots=True)
class _LazyArray:
    item_type: int
    count: int
    offset: int


class GGUFFile:
    """``GGUFFile(path)``: the metadata (``meta``, ``value``) and tensors (``tensors``,
    ``data``) of a GGUF file; a ValueError naming the file for anything that is not one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as handle:
            try:
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
            except ValueError:  # an empty file cannot be mapped
                raise ValueError(f"{self.path} is not a GGUF file: it is empty") from None
        self._pos = 0
        try:
            self._read_header()
        except (struct.error, UnicodeDecodeError, IndexError) as exc:
            raise ValueError(f"{self.path} is not a readable GGUF file: {exc}") from None

    # -- header -------------------------------------------------------------------------

    def _read_header(self) -> None:
        if self._map[:4] != MAGIC:
            raise ValueError(f"{self.path} is not a GGUF file (its first bytes are not 'GGUF')")
        self.version, n_tensors, n_meta = struct.unpack_from("<IQQ", self._map, 4)
        if self.version not in (2, 3):
            raise ValueError(f"{self.path}: GGUF version {self.version} is not read (2 or 3)")
        self._pos = 24
        self._meta: dict[str, Any] = {}
        for _ in range(n_meta):
            key = self._string()
            (kind,) = self._unpack("<I")
            self._meta[key] = self._value(kind)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            dims = self._unpack(f"<{n_dims}Q")
            kind, offset = self._unpack("<IQ")
            infos.append((name, tuple(reversed(dims)), kind, offset))
        align = int(self._meta.get("general.alignment", 32))
        start = -(-self._pos // align) * align
        self.tensors = {
            name: TensorInfo(name, shape, kind, start + offset)
            for name, shape, kind, offset in infos
        }
        for info in self.tensors.values():
            if info.offset + info.nbytes > len(self._map):
                raise ValueError(
                    f"{self.path} is truncated: tensor {info.name!r} ends past the file's end"
                )

    def _unpack(self, fmt: str) -> tuple[Any, ...]:
        out = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return out

    def _string(self) -> str:
        (size,) = self._unpack("<Q")
        text = self._map[self._pos : self._pos + size].decode("utf-8")
        self._pos += size
        return text

    def _value(self, kind: int) -> Any:
        if kind == _STRING:
            return self._string()
        if kind in _SCALARS:
            return self._unpack("<" + _SCALARS[kind])[0]
        if kind != _ARRAY:
            raise ValueError(f"metadata value type {kind} is not a GGUF type")
        item, count = self._unpack("<IQ")
        if count <= _EAGER_ITEMS:
            return [self._value(item) for _ in range(count)]
        lazy = _LazyArray(item, count, self._pos)
        if item == _STRING:
            for _ in range(count):  # walk the lengths only
                (size,) = self._unpack("<Q")
                self._pos += size
        elif item in _SCALARS:
            self._pos += count * struct.calcsize(_SCALARS[item])
        else:
            raise ValueError(f"metadata arrays of type {item} are not read")
        return lazy

    # -- access -------------------------------------------------------------------------

    @property
    def architecture(self) -> str:
        return str(self._meta.get("general.architecture", ""))

    def keys(self) -> list[str]:
        return list(self._meta)

    def value(self, key: str, default: Any = None) -> Any:
        """A metadata value: scalars as Python numbers and strings, arrays as lists (a long
        string array is parsed now), ``default`` where the file has no such key."""
        raw = self._meta.get(key, default)
        if not isinstance(raw, _LazyArray):
            return raw
        if raw.item_type == _STRING:
            pos, out = raw.offset, []
            for _ in range(raw.count):
                (size,) = struct.unpack_from("<Q", self._map, pos)
                out.append(self._map[pos + 8 : pos + 8 + size].decode("utf-8", "replace"))
                pos += 8 + size
            return out
        return list(
            struct.unpack_from(f"<{raw.count}{_SCALARS[raw.item_type]}", self._map, raw.offset)
        )

    def count(self, key: str) -> int | None:
        """How many items the array ``key`` holds (None: no such array), without parsing it."""
        raw = self._meta.get(key)
        if isinstance(raw, _LazyArray):
            return raw.count
        return len(raw) if isinstance(raw, list) else None

    def float_values(self, name: str) -> list[float] | None:
        """The values of the F32 or F16 tensor ``name``, flat, as Python floats (read
        without numpy: small tensors the config is made of); None for other types."""
        info = self.tensors[name]
        if info.type not in _FLOAT_CODES:
            return None
        count = math.prod(info.shape)
        return list(
            struct.unpack_from(f"<{count}{_FLOAT_CODES[info.type]}", self._map, info.offset)
        )

    def data(self, name: str, raw: bool = False) -> np.ndarray:
        """Tensor ``name`` as stored, a view of the mapping: F32 and F16 as their numpy
        dtype in ``shape`` (unless ``raw``); BF16 and the block formats as bytes,
        ``shape[:-1] + [bytes per row]``."""
        import numpy as np

        info = self.tensors[name]
        if info.type in _FLOAT_CODES and not raw:
            dtype = np.dtype("<" + _FLOAT_CODES[info.type])
            count = math.prod(info.shape)
            return np.frombuffer(self._map, dtype, count, info.offset).reshape(info.shape)
        shape = (*info.shape[:-1], row_bytes(info.type, info.shape[-1]))
        return np.frombuffer(self._map, np.uint8, info.nbytes, info.offset).reshape(shape)

    def holds(self, data: np.ndarray) -> bool:
        """Whether ``data`` lies in this file's mapping (a view of it, not a copy)."""
        import numpy as np

        base = np.frombuffer(self._map, np.uint8, 1, 0).ctypes.data
        lo = data.__array_interface__["data"][0] - base
        return 0 <= lo < len(self._map)

    def drop(self, data: np.ndarray) -> None:
        """Drop the whole pages under ``data`` (a view of this mapping, already copied)
        from memory; a page shared with a neighbour stays. See :meth:`release`."""
        import numpy as np

        base = np.frombuffer(self._map, np.uint8, 1, 0).ctypes.data
        lo = data.__array_interface__["data"][0] - base
        page = mmap.PAGESIZE
        start, end = -(-lo // page) * page, (lo + data.nbytes) // page * page
        if 0 <= start < end <= len(self._map):
            with contextlib.suppress(OSError, ValueError):
                self._map.madvise(mmap.MADV_DONTNEED, start, end - start)

    def release(self, keep: list[tuple[int, int]]) -> int:
        """Drop the pages of the mapping outside the ``keep`` address ranges (start, end)
        from this process's memory; returns the bytes released. Safe for any range: the
        mapping is never written, so a page dropped and read again comes back from the
        file. Loading reads every tensor once; the ones copied or converted need their
        file pages no more, and would otherwise count twice in the resident set."""
        import ctypes

        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        page = mmap.PAGESIZE
        kept = sorted((max(lo - base, 0), min(hi - base, len(self._map))) for lo, hi in keep)
        released, pos = 0, 0
        for lo, hi in [*((lo, hi) for lo, hi in kept if hi > 0 and lo < len(self._map)),
                       (len(self._map), len(self._map))]:  # fmt: skip
            start, end = -(-pos // page) * page, lo // page * page  # whole pages between
            if end > start:
                with contextlib.suppress(OSError, ValueError):
                    self._map.madvise(mmap.MADV_DONTNEED, start, end - start)
                    released += end - start
            pos = max(pos, hi)
        return released

    def describe(self, name: str) -> str:
        info = self.tensors[name]
        return f"tensor {name!r} ({type_name(info.type)}, shape {list(info.shape)})"


_FLOAT_CODES = {F32: "f", F16: "e"}  # struct codes; numpy has no BF16
