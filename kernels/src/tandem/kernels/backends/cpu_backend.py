"""The CPU backend: attention in C, the K/V cache write as the torch backend.

The C kernels walk each sequence's blocks in place (no gathered copy): decode is about
2x the plain-torch kernel with K/V streaming from memory (``benchmarks/decode_attention.py``);
prefill runs one decode-like pass per new token over its causal prefix. It is available where
the kernels can be compiled (a C compiler with OpenMP); a call the C kernel cannot take
(another dtype, an oversized head layout) runs the torch kernel instead.
"""

from __future__ import annotations

from torch import Tensor

from tandem.kernels import native
from tandem.kernels.backends.torch_backend import TorchBackend
from tandem.kernels.decode_inputs import AttentionLayer, DecodeStep
from tandem.kernels.ops.attention_checks import check_decode, check_prefill
from tandem.kernels.ops.decode_step import StepCheck


class CpuBackend(TorchBackend):
    name = "cpu"

    def __init__(self) -> None:
        self._step_check = StepCheck()

    @classmethod
    def is_available(cls) -> bool:
        """True once the C kernels are built and loaded (built at most once per machine)."""
        return native.library() is not None

    def prefill(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        cu_seqlens_q: Tensor,
        seq_lens: Tensor,
        block_tables: Tensor,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
    ) -> Tensor:
        args = (cu_seqlens_q, seq_lens, block_tables, scale, window, softcap)
        check_prefill(q, k, v, k_cache, v_cache, *args)
        out = native.paged_prefill(q, k_cache, v_cache, *args)
        if out is None:
            return super().prefill(q, k, v, k_cache, v_cache, *args)
        return out

    def decode(
        self,
        q: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        seq_lens: Tensor,
        block_tables: Tensor,
        scale: float,
        window: int = 0,
        softcap: float = 0.0,
    ) -> Tensor:
        args = (seq_lens, block_tables, scale, window, softcap)
        check_decode(q, k_cache, v_cache, *args)
        out = native.paged_decode(q, k_cache, v_cache, *args)
        if out is None:
            return super().decode(q, k_cache, v_cache, *args)
        return out

    def rope_decode(
        self,
        qkv: Tensor,
        layer: AttentionLayer,
        step: DecodeStep,
        k_cache: Tensor,
        v_cache: Tensor,
    ) -> Tensor:
        """One C call for rope, the K/V write and decode attention (the step's tensors
        validated once for all layers, see :class:`StepCheck`)."""
        self._step_check(qkv, layer, step, k_cache, v_cache)
        out = native.rope_decode(qkv, layer, step, k_cache, v_cache)
        if out is None:
            return super().rope_decode(qkv, layer, step, k_cache, v_cache)
        return out

    def op_names(self) -> list[str]:
        return ["tandem::torch_write_kv_cache"]
