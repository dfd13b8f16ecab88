"""Linear layers on a copy of the weight packed once (CPU), else ``F.linear``.

On CPU, ``F.linear`` runs MKL's sgemm on the weight as stored. oneDNN's inner product
on a copy of the weight reordered once into its own blocked layout runs the Llama
shapes of this project (K of 512..1536, N of 512..8192, M of 1..2048 tokens) 1-2x as
fast, and this project's C kernel (``native/linear_f32.c``, fp32) runs them faster
again where the CPU has AVX-512 (SmolLM2's layers: 1-16 rows 1.3-1.6x oneDNN, 64 rows
~1.1x, from 256 rows 0.95-1.0x) or AVX2 with FMA (Zen 3, one thread: a decode step reads
the weights at 12-14 GB/s, the rate of a plain sum over memory, 1.3-1.5x oneDNN; 16-256
rows 1.0-1.4x, 2048 rows 0.9-1.0x). ``benchmarks/linear.py`` measures all three side by
side; the C kernel takes every M, as no size was found where it loses by much.
The copy is made on first use and made again whenever the weight changes in place
(``load_weights`` copies into the parameter), so it can never be stale.

oneDNN builds and caches a kernel per input shape, so the token count is rounded up to
one of a few sizes (:func:`padded_rows`: powers of two to 16, then four per octave,
at most 25% padding above 16 rows): an engine whose batches take every size from 1 to
thousands would otherwise keep ~60 MB of kernels for them, and build one per new size.

Not a ``torch.library`` op: the packed weight is an opaque oneDNN tensor with no fake
or meta form; tracing code should call ``F.linear``, which this falls back to.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.native import linear_f32
from tandem.kernels.native.linear_f32 import PackedF32

KERNELS = ("native", "onednn")  # what PackedWeight packs for; "native" falls back to oneDNN


def onednn_dtypes() -> tuple[torch.dtype, ...]:
    """Weight dtypes the oneDNN path takes on this machine (none without oneDNN)."""
    if not torch.backends.mkldnn.is_available():
        return ()
    if not hasattr(torch.ops.mkldnn, "_linear_pointwise"):  # older torch builds
        return ()
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return (torch.float32, torch.bfloat16)
    return (torch.float32,)


def pack_weight(weight: Tensor) -> Tensor | None:
    """weight: [N, K] on CPU -> its oneDNN copy; None where oneDNN cannot take it."""
    checks.tensor("weight", weight, ndim=2, dtypes=checks.FLOAT_DTYPES)
    if weight.device.type != "cpu" or weight.dtype not in onednn_dtypes():
        return None
    with torch.no_grad():
        plain = weight.detach().contiguous()
        try:  # oneDNN's own blocked layout: ~1.35x the plain layout at 64 tokens
            return torch.ops.mkldnn._reorder_linear_weight(plain, None)
        except (AttributeError, RuntimeError):
            return plain.to_mkldnn()


def pack_native(weight: Tensor) -> PackedF32 | None:
    """weight: [N, K] fp32 on CPU -> its copy for the C kernel; None where it cannot run."""
    checks.tensor("weight", weight, ndim=2, dtypes=checks.FLOAT_DTYPES)
    return linear_f32.pack(weight.detach())


class PackedWeight:
    """One weight's packed copy, made again when the weight's storage or version changes,
    or another kernel is asked for."""

    __slots__ = ("_key", "_packed")

    def __init__(self) -> None:
        self._key: tuple[int, int, torch.dtype, tuple[int, ...], str] | None = None
        self._packed: Tensor | PackedF32 | None = None

    @staticmethod
    def _key_of(weight: Tensor, kernel: str) -> tuple[int, int, torch.dtype, tuple[int, ...], str]:
        return (weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape), kernel)

    def holds(self, weight: Tensor, kernel: str = "native") -> bool:
        """Whether the copy made last is ``weight``'s as it is now, for ``kernel``."""
        return self._key == self._key_of(weight, kernel)

    def get(self, weight: Tensor, kernel: str = "native") -> Tensor | PackedF32 | None:
        """The copy for ``kernel`` (one of :data:`KERNELS`): "native" packs for the C
        kernel where it runs (fp32; AVX-512, or AVX2 with FMA) and for oneDNN elsewhere."""
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        key = self._key_of(weight, kernel)
        if key != self._key:
            self._packed = None
            if kernel == "native":
                self._packed = pack_native(weight)
            if self._packed is None:
                self._packed = pack_weight(weight)
            self._key = key
        return self._packed

    def clear(self) -> None:
        self._key = self._packed = None


def linear(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, packed: Tensor | None = None
) -> Tensor:
    """``x @ weight.T + bias``: x [..., K], weight [N, K] -> [..., N].

    ``packed`` (from :func:`pack_weight`, :func:`pack_native` or :class:`PackedWeight`)
    selects its kernel, oneDNN or C, when x matches it (CPU, the weight's dtype, no
    gradient wanted); otherwise ``F.linear``.
    """
    checks.tensor("x", x, dtypes=checks.FLOAT_DTYPES)
    checks.tensor("weight", weight, ndim=2, dtypes=checks.FLOAT_DTYPES)
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"x must have shape [..., {weight.shape[1]}] to match weight "
            f"{tuple(weight.shape)}, got {tuple(x.shape)}"
        )
    if packed is None or weight.shape[1] == 0 or not _packed_fits(x, weight, bias):
        return F.linear(x, weight, bias)  # K = 0: no sums, every output its bias
    x2 = x.reshape(-1, x.shape[-1])  # [M, K]
    if isinstance(packed, PackedF32):
        out = linear_f32.linear(x2, packed, bias)
        if out is None:
            return F.linear(x, weight, bias)
        return out.view(*x.shape[:-1], weight.shape[0])
    m, rows = x2.shape[0], padded_rows(x2.shape[0])
    if rows != m:  # zero rows up to the bucket; their outputs are dropped
        x2 = torch.cat([x2, x2.new_zeros(rows - m, x2.shape[1])])
    out = torch.ops.mkldnn._linear_pointwise(x2, packed, bias, "none", [], "")
    return out[:m].view(*x.shape[:-1], weight.shape[0])


def padded_rows(m: int) -> int:
    """``m`` rounded up to 1, 2, 4, 8, 16, then four sizes per octave (20, 24, 28, 32,
    40, 48, ...): above 16 at most 25% more rows; 33 sizes cover 1..2048."""
    if m <= 16:
        return 1 << max(m - 1, 0).bit_length()
    step = 1 << ((m - 1).bit_length() - 3)  # a quarter of the octave m falls in
    return -(-m // step) * step


def _packed_fits(x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    if x.device.type != "cpu" or x.dtype != weight.dtype:
        return False
    if bias is not None and bias.dtype != weight.dtype:
        return False
    if not torch.is_grad_enabled():
        return True
    return not (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
