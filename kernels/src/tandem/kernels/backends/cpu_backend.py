"""The CPU backend: decode attention in C, everything else as the torch backend.

Decode dominates a long generation's attention time. The C kernel walks each
sequence's blocks in place (no gathered copy), 3-4x faster than the plain-torch decode
on the benchmark's shapes (``benchmarks/decode_attention.py``). It is available where
the kernels can be compiled (a C compiler with OpenMP); a call the C kernel cannot take
(another dtype, an oversized head layout) runs the torch kernel instead.
"""

from __future__ import annotations

from torch import Tensor

from tandem.kernels import native
from tandem.kernels.backends.torch_backend import TorchBackend
from tandem.kernels.ops.attention import check_decode


class CpuBackend(TorchBackend):
    name = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        """True once the C kernels are built and loaded (built at most once per machine)."""
        return native.library() is not None

    def decode(
        self,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        seq_lens: Tensor,
        block_tables: Tensor,
        scale: float,
    ) -> Tensor:
        check_decode(q, k_cache, v_cache, seq_lens, block_tables, scale)
        out = native.paged_decode(q, k_cache, v_cache, seq_lens, block_tables, scale)
        if out is None:
            return super().decode(q, k_cache, v_cache, seq_lens, block_tables, scale)
        return out

    def op_names(self) -> list[str]:
        return ["tandem::torch_write_kv_cache", "tandem::torch_prefill_attention"]
