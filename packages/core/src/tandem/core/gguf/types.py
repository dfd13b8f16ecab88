"""The GGML tensor types: their names, block sizes, and which ones Tandem reads.

Sizes come from the ``gguf`` package's table (llama.cpp's own numbers). Tandem reads the
float types and the block formats its kernels run (:data:`READ`); anything else (the IQ
families, ternary and FP4 formats) is refused before any work, naming the tensor.
"""

from __future__ import annotations

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

F32, F16, BF16 = 0, 1, 30
FLOATS = (F32, F16, BF16)
# block formats read: the 32-value ones and the K-quants' super-blocks of 256
BLOCKS = (2, 3, 6, 7, 8, 10, 11, 12, 13, 14)  # Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K
READ = FLOATS + BLOCKS


def type_name(kind: int) -> str:
    try:
        return GGMLQuantizationType(kind).name
    except ValueError:
        return f"type {kind}"


def block_shape(kind: int) -> tuple[int, int]:
    """(values, bytes) of one block of ``kind`` (floats: one value)."""
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
