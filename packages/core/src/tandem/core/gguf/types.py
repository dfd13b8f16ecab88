"""The GGML tensor types: their names, block sizes, and which ones Tandem reads.

The types Tandem reads (:data:`READ`: the float types and the block formats its kernels
run) are described here, so that a process that only reads a file's header (the v1
engine's front) imports neither numpy nor the ``gguf`` package; the sizes are llama.cpp's
(a test holds them equal to the ``gguf`` package's table). Any other type (the IQ
families, ternary and FP4 formats) is looked up in that package, only when a file holds
one, and refused before any work, naming the tensor.
"""

from __future__ import annotations

F32, F16, BF16 = 0, 1, 30
FLOATS = (F32, F16, BF16)
# block formats read: the 32-value ones and the K-quants' super-blocks of 256
BLOCKS = (2, 3, 6, 7, 8, 10, 11, 12, 13, 14)  # Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K
READ = FLOATS + BLOCKS

# type -> (name, values per block, bytes per block)
KNOWN: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2),
    2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
}  # fmt: skip


def type_name(kind: int) -> str:
    if kind in KNOWN:
        return KNOWN[kind][0]
    from gguf.constants import GGMLQuantizationType

    try:
        return GGMLQuantizationType(kind).name
    except ValueError:
        return f"type {kind}"


def block_shape(kind: int) -> tuple[int, int]:
    """(values, bytes) of one block of ``kind`` (floats: one value)."""
    if kind in KNOWN:
        return KNOWN[kind][1:]
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        return GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        raise ValueError(f"GGML tensor type {kind} is unknown") from None


def row_bytes(kind: int, columns: int) -> int:
    """Bytes of one row of ``columns`` values stored as ``kind``."""
    values, size = block_shape(kind)
    if columns % values:
        raise ValueError(
            f"a {type_name(kind)} row holds whole blocks of {values} values, got {columns}"
        )
    return columns // values * size


def check_readable(kind: int, where: str) -> None:
    """ValueError naming ``where`` unless tensors of ``kind`` can be read."""
    if kind not in READ:
        names = ", ".join(type_name(k) for k in READ)
        raise ValueError(
            f"{where} is stored as {type_name(kind)}, which Tandem does not read; "
            f"files in {names} load (requantize the file, e.g. to Q4_K_M)"
        )
